// The backward driver (FlashAttention-2, Dao 2023, Alg. 2): cuts q and k into tiles, splits each
// kv head's k tiles into chunks, computes D_i when not given, runs the work items in the ISA copy
// the call resolved (isa/backward.cpp) and sums per-chunk dq partials in chunk order, so results
// are bitwise reproducible for a given thread count.
#include "kernel/backward.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "cpattn/tensor.h"
#include "kernel/parallel.h"
#include "kernel/scratch.h"
#include "kernel/tile_plan.h"
#include "kernel/tiles.h"

namespace cpattn::detail {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Per-worker scratch (floats; sizes as in isa/backward.cpp's Scratch and Lane), one counted
// Tensor each: the k tile's arrays, then plan.lanes lane blocks of the q tiles' arrays.
BackwardOffsets plan_scratch(const BackwardProblem& p, const BackwardPlan& plan,
                             ScratchLayout& layout) {
  const int64_t tq = kBackwardTileQ, tk = kBackwardTileK;
  BackwardOffsets o{};
  ScratchLayout lane;
  o.qt = lane.add(tq * p.Dqk);
  o.ot = lane.add(tq * p.Dv);
  o.qp = lane.add(tq * plan.dqk_pad);
  o.op = lane.add(tq * plan.dv_pad);
  o.dq = lane.add(tq * plan.dqk_pad);
  o.lse_safe = lane.add(tq);
  o.dd = lane.add(tq);
  o.lane_stride = lane.total();
  o.kr = layout.add(tk * p.Dqk);
  o.kp = layout.add(tk * plan.dqk_pad);
  o.vr = layout.add(tk * p.Dv);
  o.st = layout.add(tk * tq);
  o.dst = layout.add(tk * tq);
  o.pzt = layout.add(tk * tq);
  o.dcap = layout.add(p.softcap > 0.0f ? tk * tq : 0);
  o.q_rel = layout.add(tq);
  o.k_rel = layout.add(tk);
  o.dk = layout.add(plan.tiles_per_chunk * tk * plan.dqk_pad);
  o.dv = layout.add(plan.tiles_per_chunk * tk * plan.dv_pad);
  o.lanes = layout.add(plan.lanes * o.lane_stride);
  return o;
}

// BackwardOptions::before_dkdv, run once per call by the first worker about to write dk/dv.
struct DkdvHook {
  const std::function<void()>* fn = nullptr;
  std::mutex mutex;
  bool done = false;
  std::exception_ptr error;
};

// The partial rows summed in chunk order, s = partial_0 + partial_1 + ..., then
//   chunk0_writes_dq: dq = dq + s (dq holds chunk 0's contribution, added to the old dq when
//                     accumulating);
//   otherwise:        dq = (accumulate ? dq : 0) + s.
void reduce_dq(const BackwardProblem& p, const BackwardPlan& plan) {
  const int64_t chunk_stride = p.B * p.Hq * p.Sq * plan.dqk_pad;
  const int64_t partials = plan.chunks - (plan.chunk0_writes_dq ? 1 : 0);
  const bool add = p.accumulate || plan.chunk0_writes_dq;
  parallel_for(p.B * p.Hq, p.num_threads, p.interruption_point, [&](int64_t bh, int) {
    const int64_t b = bh / p.Hq, h = bh % p.Hq;
    for (int64_t i = 0; i < p.Sq; ++i) {
      const float* row = plan.dq_partial + (bh * p.Sq + i) * plan.dqk_pad;
      for (int64_t d = 0; d < p.Dqk; ++d) {
        float sum = row[d];
        for (int64_t c = 1; c < partials; ++c) sum += row[c * chunk_stride + d];
        if (p.dq.dtype != DType::kF32) {  // rounded once (write_element: cpattn/dtype.h)
          write_element(p.dq, b, i, h, d,
                        p.accumulate ? read_element(p.dq, b, i, h, d) + sum : sum);
          continue;
        }
        float& dst = p.dq(b, i, h, d);
        dst = add ? dst + sum : sum;
      }
    }
  });
}

// BackwardOptions::dsink: dsink[H] (+)= -sum_{b, i} exp(sink[H] - lse_i) D_i over the call's
// rows of each head, summed in double in row order (deterministic), rounded once. Rows with
// lse = -inf contribute nothing (as everywhere in the backward).
void sink_gradient(const BackwardProblem& p, const float* delta) {
  for (int64_t h = 0; h < p.Hq; ++h) {
    const size_t head = static_cast<size_t>(p.dropout_head_offset + h);
    const double sigma = p.sink[head];
    double sum = 0.0;
    for (int64_t b = 0; b < p.B; ++b) {
      const int64_t row0 = (b * p.Hq + h) * p.Sq;
      for (int64_t i = 0; i < p.Sq; ++i) {
        const float lse = p.lse[static_cast<size_t>(row0 + i)];
        if (lse == -std::numeric_limits<float>::infinity()) continue;
        sum += std::exp(sigma - lse) * delta[row0 + i];
      }
    }
    const float grad = static_cast<float>(-sum);
    p.dsink[head] = p.accumulate ? p.dsink[head] + grad : grad;
  }
}

}  // namespace

void before_dkdv_write(const BackwardPlan& plan) {
  auto* hook = static_cast<DkdvHook*>(plan.hook_state);
  if (hook->fn == nullptr) return;
  const std::lock_guard<std::mutex> lock(hook->mutex);
  if (!hook->done) {
    hook->done = true;
    try {
      (*hook->fn)();
    } catch (...) {
      hook->error = std::current_exception();
    }
  }
  if (hook->error) std::rethrow_exception(hook->error);
}

void run_delta(ConstView dout, ConstView out, std::span<float> delta, int num_threads,
               const std::function<void()>* interrupt, Isa isa) {
  const IsaKernels kernels = isa_kernels(isa);
  const int64_t B = dout.shape[0], S = dout.shape[1], H = dout.shape[2];
  parallel_for(B * H, num_threads, interrupt, [&](int64_t bh, int) {
    kernels.row_dots(dout, out, bh / H, bh % H, 0, S, delta.data() + bh * S);
  });
}

void run_backward(const BackwardProblem& p) {
  // No early exit for empty q or k sides: overwrite mode must still zero dk/dv (or dq).
  const IsaKernels isa = isa_kernels(p.isa);
  const std::vector<TileRange> q_tiles = make_tiles(p.q_pos, p.q_doc, kBackwardTileQ);
  const std::vector<TileRange> k_tiles = make_tiles(p.k_pos, p.k_doc, kBackwardTileK);
  const TileMask mask(p, q_tiles);
  BackwardPlan plan{};
  plan.p = &p;
  plan.mask = &mask;
  plan.q_tiles = q_tiles.data();
  plan.n_q_tiles = static_cast<int64_t>(q_tiles.size());
  plan.lanes = std::clamp<int64_t>(plan.n_q_tiles, 1, kBackwardMaxLanes);
  plan.k_tiles = k_tiles.data();
  plan.n_k_tiles = static_cast<int64_t>(k_tiles.size());
  // Enough (batch, kv head) items to keep every thread busy, or as many equal items per thread
  // (every item has the same mask) -> one chunk, and dq rows are complete in one item;
  // otherwise split each kv head's k tiles into num_threads interleaved chunks (tile t goes to
  // chunk t % chunks, which also balances causal work) whose dq contributions meet in per-chunk
  // partial buffers.
  const int64_t kv_items = p.B * p.Hkv;
  plan.chunks = kv_items >= 4 * p.num_threads || kv_items % p.num_threads == 0 ? 1 : p.num_threads;
  plan.tiles_per_chunk = (plan.n_k_tiles + plan.chunks - 1) / plan.chunks;
  plan.dqk_pad = round_up(p.Dqk, isa.nr);
  plan.dv_pad = round_up(p.Dv, isa.nr);
  ScratchLayout layout;
  plan.at = plan_scratch(p, plan, layout);

  Tensor delta_storage;
  if (p.delta.empty()) {
    delta_storage = Tensor({p.B, p.Hq, p.Sq});
    run_delta(p.dout, p.out, delta_storage.span(), p.num_threads, p.interruption_point, p.isa);
    plan.delta = delta_storage.data();
  } else {
    plan.delta = p.delta.data();
  }
  if (!p.dsink.empty()) sink_gradient(p, plan.delta);
  // An fp32 dq takes chunk 0's contributions itself, so only the other chunks need partial
  // rows (half of them at 2 threads); a 16-bit dq is rounded once, from the sum of all chunks.
  plan.chunk0_writes_dq = p.dq.dtype == DType::kF32;
  Tensor dq_partial;  // [chunks - chunk0_writes_dq][B][Hq][Sq][dqk_pad] fp32 dq contributions
  if (plan.chunks > 1) {
    const int64_t partials = plan.chunks - (plan.chunk0_writes_dq ? 1 : 0);
    dq_partial = Tensor({partials, p.B, p.Hq, p.Sq, plan.dqk_pad});
    plan.dq_partial = dq_partial.data();
  }
  DkdvHook hook;
  hook.fn = p.before_dkdv;
  plan.hook_state = &hook;

  const int64_t items = p.B * p.Hkv * plan.chunks;
  std::vector<Tensor> scratch(static_cast<size_t>(worker_count(items, p.num_threads)));
  parallel_for(items, p.num_threads, p.interruption_point, [&](int64_t item, int worker) {
    Tensor& buf = scratch[static_cast<size_t>(worker)];
    if (buf.numel() == 0) buf = Tensor({layout.total()});
    isa.backward_item(plan, item, buf.data());
  });
  scratch.clear();
  if (plan.chunks > 1) reduce_dq(p, plan);
}

}  // namespace cpattn::detail
