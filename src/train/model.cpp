// Transformer forward/backward on a CP shard: layer forward (shared by the first pass and the
// recompute), layer backward, the LM head and the per-step driver with or without checkpointing.
#include "train/model.h"

#include <functional>
#include <optional>
#include <string>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/recompute.h"
#include "train/cross_entropy.h"
#include "train/embedding.h"
#include "train/linear.h"
#include "train/mlp.h"
#include "train/rmsnorm.h"
#include "train/rope.h"

namespace cpattn::train {

ShardBatch shard_batch(const Batch& batch, const SequenceSharding& seq) {
  seq.validate();
  CPATTN_CHECK_EQ(seq.seq_len, batch.seq_len, ErrorCode::kInvalidArgument,
                  "shard_batch: sharding seq_len vs batch seq_len");
  const std::vector<int64_t> tokens = shard_token_indices(seq, seq.cp_rank);
  const std::vector<int64_t> positions = seq.local_positions();
  ShardBatch shard;
  shard.batch = batch.batch;
  shard.local_len = static_cast<int64_t>(tokens.size());
  shard.total_tokens = batch.batch * batch.seq_len;
  const size_t rows = static_cast<size_t>(shard.rows());
  shard.inputs.reserve(rows);
  shard.targets.reserve(rows);
  shard.row_positions.reserve(rows);
  for (int64_t b = 0; b < batch.batch; ++b) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const size_t global = static_cast<size_t>(b * batch.seq_len + tokens[i]);
      shard.inputs.push_back(batch.inputs[global]);
      shard.targets.push_back(batch.targets[global]);
      shard.row_positions.push_back(positions[i]);
    }
  }
  return shard;
}

namespace {

// Everything a layer needs besides its weights; one per step and rank.
struct Context {
  Communicator& comm;
  const ModelConfig& cfg;
  const StepOptions& opt;
  const ShardBatch& shard;
  AttentionParams attn;
  int64_t n;  // token rows B * S_r
  MemoryCounter* counter;
  const RopeTable& rope;  // the rows' RoPE angles, shared by every layer's q and k

  // An [N, cols] fp32 row matrix, unset: every caller's next op writes all of it.
  Tensor rows(int64_t cols) const { return Tensor::uninitialized({n, cols}, DType::kF32, counter); }
  // [B, S_r, heads, D] view of the fused qkv rows starting at column `offset`: no copy.
  template <typename T>
  StridedView<T> qkv_view(T* qkv, int64_t offset, int64_t heads) const {
    const int64_t w = cfg.qkv_dim(), d = cfg.head_dim();
    return {qkv + offset, {shard.batch, shard.local_len, heads, d}, {shard.local_len * w, w, d, 1}};
  }
  // A dense [N, heads * D] row matrix seen as [B, S_r, heads, D].
  template <typename T>
  StridedView<T> bshd(T* data, int64_t heads) const {
    const int64_t d = cfg.head_dim();
    return {data,
            {shard.batch, shard.local_len, heads, d},
            {shard.local_len * heads * d, heads * d, d, 1}};
  }
};

// a += b over equal-sized spans.
void add_into(std::span<float> a, std::span<const float> b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

// One layer's intermediates between its forward and its backward (all [N, .] row matrices).
struct LayerActs {
  Tensor xn1;                         // rmsnorm(x; attn_norm)             [N, d]
  Tensor qkv;                         // Wqkv xn1, q and k rotated         [N, qkv_dim] (fp32 runs)
  Tensor q, k, v;                     // qkv's q, k, v rounded [B, S_r, H, D]  (16-bit runs)
  std::optional<ForwardResult> attn;  // out [B, S_r, Hq, D] = [N, q_dim], in the run's dtype
  Tensor h;                           // x + Wo out                        [N, d]
  Tensor xn2;                         // rmsnorm(h; mlp_norm)              [N, d]
  MlpCache mlp;                       // pre/act                           [N, hidden]
};

// The attention operands of a layer: views into the fused fp32 qkv rows, or (16-bit
// activations: StepOptions::activations) the rounded copies layer_forward made of them.
struct AttentionInputs {
  ConstView q, k, v;
};
AttentionInputs attention_inputs(const Context& c, const LayerActs& a) {
  if (c.opt.activations != DType::kF32) return {a.q.view(), a.k.view(), a.v.view()};
  const float* qkv = a.qkv.data();
  return {c.qkv_view(qkv, 0, c.cfg.heads), c.qkv_view(qkv, c.cfg.q_dim(), c.cfg.kv_heads),
          c.qkv_view(qkv, c.cfg.q_dim() + c.cfg.kv_dim(), c.cfg.kv_heads)};
}

// attention's out as fp32 [N, q_dim] rows for Wo: its own rows in fp32 runs, else widened into
// `wide` (a temporary: the 16-bit out is what the layer keeps).
std::span<const float> out_rows(const Context& c, const ForwardResult& r, Tensor& wide) {
  if (r.out.dtype() == DType::kF32) return r.out.span();
  wide = dense_copy(r.out.view(), DType::kF32, MemoryLayout::kBSHD, c.counter);
  return wide.span();
}

// Runs the attention of a layer on its rotated q, k, v views: attention_forward the first time,
// recompute_forward under recompute.
using AttentionFn = std::function<ForwardResult(ConstView q, ConstView k, ConstView v)>;

// The attention options of layer `layer`: the step's, with the layer as the call site, so the
// call agreement names the layer and tells the layers' calls apart.
CpOptions layer_options(const StepOptions& o, int64_t layer) {
  CpOptions options = o.cp;
  options.call_site = "layer " + std::to_string(layer);
  return options;
}

// y = h + mlp(rmsnorm(h)),  h = x + Wo attn(rope(q), rope(k), v),  [q|k|v] = Wqkv rmsnorm(x).
LayerActs layer_forward(const Context& c, const LayerTensors<const float>& w, const Tensor& x,
                        const AttentionFn& attention, Tensor& y) {
  const ModelConfig& cfg = c.cfg;
  const int64_t d = cfg.d_model, hd = cfg.head_dim();
  LayerActs a;
  a.xn1 = c.rows(d);
  rmsnorm_forward(c.n, d, x.span(), w.attn_norm, a.xn1.span());
  a.qkv = c.rows(cfg.qkv_dim());
  linear_forward({c.n, d, cfg.qkv_dim()}, a.xn1.span(), w.wqkv, {}, a.qkv.span());
  // Rotate q (columns [0, q_dim)) and k (columns [q_dim, q_dim + kv_dim)) by global positions.
  rope_forward({c.n, cfg.heads, hd, cfg.qkv_dim()}, a.qkv.span(), c.rope);
  rope_forward({c.n, cfg.kv_heads, hd, cfg.qkv_dim()}, a.qkv.span().subspan(cfg.q_dim()), c.rope);
  if (c.opt.activations != DType::kF32) {
    // 16-bit activations: attention takes q, k, v rounded once (round to nearest even) from
    // the fp32 rows, which are then no longer needed.
    const float* qkv = a.qkv.data();
    const DType dt = c.opt.activations;
    a.q = dense_copy(c.qkv_view(qkv, 0, cfg.heads), dt, MemoryLayout::kBSHD, c.counter);
    a.k =
        dense_copy(c.qkv_view(qkv, cfg.q_dim(), cfg.kv_heads), dt, MemoryLayout::kBSHD, c.counter);
    a.v = dense_copy(c.qkv_view(qkv, cfg.q_dim() + cfg.kv_dim(), cfg.kv_heads), dt,
                     MemoryLayout::kBSHD, c.counter);
    a.qkv = Tensor();
  }
  const AttentionInputs in = attention_inputs(c, a);
  a.attn.emplace(attention(in.q, in.k, in.v));
  a.h = c.rows(d);
  Tensor wide_out;
  linear_forward({c.n, cfg.q_dim(), d}, out_rows(c, *a.attn, wide_out), w.wo, {}, a.h.span());
  wide_out = Tensor();
  add_into(a.h.span(), x.span());
  a.xn2 = c.rows(d);
  rmsnorm_forward(c.n, d, a.h.span(), w.mlp_norm, a.xn2.span());
  y = c.rows(d);
  a.mlp = mlp_forward({c.n, d, cfg.hidden()}, a.xn2.span(), w.w1, w.w2, y.span(), c.counter);
  add_into(y.span(), a.h.span());
  return a;
}

// Backward of layer_forward: `grad` holds dL/dy on entry and dL/dx on return; `rng` is the
// RngState the layer's attention drew, `attention_options` its options (layer_options). Frees each
// intermediate of `a` as soon as it is consumed (the ForwardResult right after attention).
void layer_backward(const Context& c, const LayerTensors<const float>& w,
                    const LayerTensors<float>& g, const Tensor& x, LayerActs& a, RngState rng,
                    const CpOptions& attention_options, Tensor& grad) {
  const ModelConfig& cfg = c.cfg;
  const int64_t d = cfg.d_model, hd = cfg.head_dim();
  // y = h + mlp(rmsnorm(h)): dh = dy + rmsnorm'(mlp'(dy)).
  Tensor t = c.rows(d);
  mlp_backward({c.n, d, cfg.hidden()}, grad.span(), a.xn2.span(), w.w1, w.w2, a.mlp, t.span(), g.w1,
               g.w2, c.counter);
  a.mlp = MlpCache();
  a.xn2 = Tensor();
  rmsnorm_backward(c.n, d, t.span(), a.h.span(), w.mlp_norm, t.span(), g.mlp_norm);
  add_into(grad.span(), t.span());
  a.h = Tensor();
  // h = x + Wo out: dx = dh + (path through attention), dout = dh Wo.
  Tensor dout = c.rows(cfg.q_dim());
  {
    Tensor wide_out;
    linear_backward({c.n, cfg.q_dim(), d}, grad.span(), out_rows(c, *a.attn, wide_out), w.wo,
                    dout.span(), g.wo, {});
  }
  if (c.opt.activations != DType::kF32) {
    // dout in the activations' dtype, as attention's other tensors.
    dout = dense_copy(c.bshd<const float>(dout.data(), cfg.heads), c.opt.activations,
                      MemoryLayout::kBSHD, c.counter);
  }
  const AttentionInputs in = attention_inputs(c, a);
  const ConstView dout_view =
      dout.dtype() == DType::kF32 ? c.bshd<const float>(dout.data(), cfg.heads) : dout.view();
  AttentionGradients ag = attention_backward(c.comm, dout_view, in.q, in.k, in.v, *a.attn,
                                             c.opt.seq, c.attn, rng, attention_options);
  a.attn.reset();
  dout = Tensor();
  a.qkv = Tensor();
  a.q = Tensor();
  a.k = Tensor();
  a.v = Tensor();
  // Gather dq | dk | dv into fused fp32 rows (widened from 16-bit), un-rotate dq and dk, then
  // through Wqkv and rmsnorm.
  Tensor dqkv = c.rows(cfg.qkv_dim());
  float* dst = dqkv.data();
  copy_view(ag.dq.view(), c.qkv_view(dst, 0, cfg.heads));
  copy_view(ag.dk.view(), c.qkv_view(dst, cfg.q_dim(), cfg.kv_heads));
  copy_view(ag.dv.view(), c.qkv_view(dst, cfg.q_dim() + cfg.kv_dim(), cfg.kv_heads));
  ag = AttentionGradients();
  rope_backward({c.n, cfg.heads, hd, cfg.qkv_dim()}, dqkv.span(), c.rope);
  rope_backward({c.n, cfg.kv_heads, hd, cfg.qkv_dim()}, dqkv.span().subspan(cfg.q_dim()), c.rope);
  linear_backward({c.n, d, cfg.qkv_dim()}, dqkv.span(), a.xn1.span(), w.wqkv, t.span(), g.wqkv, {});
  dqkv = Tensor();
  a.xn1 = Tensor();
  rmsnorm_backward(c.n, d, t.span(), x.span(), w.attn_norm, t.span(), g.attn_norm);
  add_into(grad.span(), t.span());
}

// Final norm and LM head: the logits [N, vocab] of the last layer's output x.
Tensor head_logits(const Context& c, const ModelParams& params, const Tensor& x, Tensor& xf) {
  const int64_t d = c.cfg.d_model, vocab = c.cfg.vocab;
  xf = c.rows(d);
  rmsnorm_forward(c.n, d, x.span(), params.final_norm(), xf.span());
  Tensor logits = c.rows(vocab);
  linear_forward({c.n, d, vocab}, xf.span(), params.lm_head(), {}, logits.span());
  return logits;
}

// Checks the arguments shared by forward_backward and forward_logits.
void check_step_args(const Communicator& comm, const ShardBatch& shard,
                     const StepOptions& options) {
  CPATTN_CHECK_EQ(options.seq.cp_rank, comm.rank(), ErrorCode::kInvalidArgument,
                  "forward_backward: sharding cp_rank vs comm.rank()");
  CPATTN_CHECK_EQ(shard.local_len, options.seq.local_length(), ErrorCode::kShapeMismatch,
                  "forward_backward: shard rows per sequence");
}

// Final norm, LM head and cross-entropy, forward and backward at once (nothing after them needs
// the logits). Returns this rank's share of the mean loss; `grad` becomes dL/dx_L.
double head_forward_backward(const Context& c, const ModelParams& params, ModelGrads& grads,
                             const Tensor& x, Tensor& grad) {
  const int64_t d = c.cfg.d_model, vocab = c.cfg.vocab;
  Tensor xf;
  Tensor logits = head_logits(c, params, x, xf);
  const double loss = cross_entropy_backward(vocab, logits.span(), c.shard.targets,
                                             c.shard.total_tokens, 1.0f, logits.span());
  grad = c.rows(d);
  linear_backward({c.n, d, vocab}, logits.span(), xf.span(), params.lm_head(), grad.span(),
                  grads.lm_head(), {});
  rmsnorm_backward(c.n, d, grad.span(), x.span(), params.final_norm(), grad.span(),
                   grads.final_norm());
  return loss;
}

}  // namespace

AttentionParams attention_params(float dropout) {
  AttentionParams attn;
  attn.causal = true;
  attn.dropout_p = dropout;
  return attn;
}

double forward_backward(Communicator& comm, const ModelParams& params, const ShardBatch& shard,
                        const StepOptions& options, Generator& generator, ModelGrads& grads) {
  const ModelConfig& cfg = params.config();
  check_step_args(comm, shard, options);
  CPATTN_CHECK_EQ(grads.numel(), params.numel(), ErrorCode::kShapeMismatch,
                  "forward_backward: gradient numel vs parameter numel");
  const AttentionParams attn = attention_params(options.dropout);
  const RopeTable rope(shard.row_positions, cfg.head_dim(), cfg.rope_base);
  const Context c{comm, cfg, options, shard, attn, shard.rows(), &comm.memory(), rope};
  const auto layers = static_cast<size_t>(cfg.layers);

  Tensor x = c.rows(cfg.d_model);
  embedding_forward(cfg.vocab, cfg.d_model, shard.inputs, params.embed(), x.span());

  // Forward. Both modes keep every layer input; without recompute also every intermediate,
  // with recompute only the ~200-byte AttentionCheckpoint (which records the RngState).
  const RngState first_rng = generator.state();
  std::vector<Tensor> inputs(layers);
  std::vector<std::optional<LayerActs>> acts(layers);
  std::vector<AttentionCheckpoint> checkpoints(layers);
  for (size_t l = 0; l < layers; ++l) {
    throw_if_stop_requested(options.cp);  // between layers too: their GEMMs have no checks
    const RngState rng = generator.next();
    const CpOptions layer_opts = layer_options(options, static_cast<int64_t>(l));
    const AttentionFn first = [&](ConstView q, ConstView k, ConstView v) {
      return attention_forward(comm, q, k, v, options.seq, attn, rng, layer_opts);
    };
    Tensor y;
    LayerActs a = layer_forward(c, params.layer(static_cast<int64_t>(l)), x, first, y);
    if (options.recompute) {
      checkpoints[l] = make_checkpoint(*a.attn);
    } else {
      acts[l].emplace(std::move(a));
    }
    inputs[l] = std::move(x);
    x = std::move(y);
  }

  Tensor grad;
  const double local_loss = head_forward_backward(c, params, grads, x, grad);
  x = Tensor();

  for (size_t l = layers; l-- > 0;) {
    throw_if_stop_requested(options.cp);
    const auto li = static_cast<int64_t>(l);
    // Restore the step's generator and skip to layer l: the state layer l drew.
    Generator replay(first_rng.seed, first_rng.offset + l);
    const RngState replayed = replay.next();
    const CpOptions layer_opts = layer_options(options, li);
    if (options.recompute) {
      // The replayed state must equal the one recorded in the checkpoint (recompute_forward
      // checks it, and that q, k, v are the same).
      RecomputeOptions ropts;
      ropts.cp = layer_opts;
      const AttentionFn again = [&](ConstView q, ConstView k, ConstView v) {
        return recompute_forward(comm, checkpoints[l], replayed, q, k, v, options.seq, attn, ropts);
      };
      Tensor y;
      acts[l].emplace(layer_forward(c, params.layer(li), inputs[l], again, y));
    }
    layer_backward(c, params.layer(li), grads.layer(li), inputs[l], *acts[l], replayed, layer_opts,
                   grad);
    acts[l].reset();
    inputs[l] = Tensor();
  }
  embedding_backward(cfg.vocab, cfg.d_model, shard.inputs, grad.span(), grads.embed());

  double loss = local_loss;
  comm.allreduce_sum(std::span<double>(&loss, 1));
  return loss;
}

Tensor forward_logits(Communicator& comm, const ModelParams& params, const ShardBatch& shard,
                      const StepOptions& options, Generator& generator) {
  const ModelConfig& cfg = params.config();
  check_step_args(comm, shard, options);
  const AttentionParams attn = attention_params(options.dropout);
  const RopeTable rope(shard.row_positions, cfg.head_dim(), cfg.rope_base);
  const Context c{comm, cfg, options, shard, attn, shard.rows(), &comm.memory(), rope};
  Tensor x = c.rows(cfg.d_model);
  embedding_forward(cfg.vocab, cfg.d_model, shard.inputs, params.embed(), x.span());
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const RngState rng = generator.next();
    const CpOptions layer_opts = layer_options(options, l);
    const AttentionFn first = [&](ConstView q, ConstView k, ConstView v) {
      return attention_forward(comm, q, k, v, options.seq, attn, rng, layer_opts);
    };
    Tensor y;
    layer_forward(c, params.layer(l), x, first, y);  // the layer's intermediates die here
    x = std::move(y);
  }
  Tensor xf;
  return head_logits(c, params, x, xf);
}

double forward_loss(Communicator& comm, const ModelParams& params, const ShardBatch& shard,
                    const StepOptions& options, Generator& generator) {
  const Tensor logits = forward_logits(comm, params, shard, options, generator);
  double loss = cross_entropy_forward(params.config().vocab, logits.span(), shard.targets,
                                      shard.total_tokens);
  comm.allreduce_sum(std::span<double>(&loss, 1));
  return loss;
}

}  // namespace cpattn::train
