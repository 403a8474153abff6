// The byte-level transformer's forward and backward on one rank's shard of a batch: context
// parallelism through cpattn attention, with every layer checkpointed (recompute) or not.
#pragma once

#include <cstdint>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/cp_options.h"
#include "cpattn/dtype.h"
#include "cpattn/generator.h"
#include "cpattn/layout.h"
#include "cpattn/params.h"
#include "train/data.h"
#include "train/model_params.h"

namespace cpattn::train {

/// One rank's tokens of a batch: for every sequence b, the tokens the rank's layout assigns to it
/// (inputs AND their next-byte targets), rows in local order. Row n = b * S_r + i holds global
/// token t = shard_token_indices(...)[i] of sequence b.
struct ShardBatch {
  int64_t batch = 0;                   ///< B
  int64_t local_len = 0;               ///< S_r
  int64_t total_tokens = 0;            ///< B * S of the whole batch: the loss's denominator
  std::vector<int32_t> inputs;         ///< [B * S_r] input bytes
  std::vector<int32_t> targets;        ///< [B * S_r] next bytes of the same tokens
  std::vector<int64_t> row_positions;  ///< [B * S_r] global position t of each row (RoPE)
  int64_t rows() const { return batch * local_len; }
};

/// Rank seq.cp_rank's shard of `batch`. Throws Error(kInvalidArgument) when seq.seq_len differs
/// from batch.seq_len (or what SequenceSharding::validate throws).
ShardBatch shard_batch(const Batch& batch, const SequenceSharding& seq);

/// The model's attention: causal, with attention dropout `dropout`.
AttentionParams attention_params(float dropout);

/// How one step runs; equal on every rank except seq.cp_rank.
struct StepOptions {
  SequenceSharding seq;   ///< layout, S, P and this rank (positions empty: position = index)
  float dropout = 0.0f;   ///< attention dropout probability, in [0, 1)
  bool recompute = true;  ///< checkpoint every layer (keep only its input and RngState)
  /// dtype of attention's tensors: q, k, v (rounded from the fp32 rows after RoPE), out, dout,
  /// dq, dk, dv; lse stays fp32. kBF16 / kF16 need the ring strategy. Weights, optimizer state,
  /// gradients and every other op stay fp32 (fp32 master weights).
  DType activations = DType::kF32;
  CpOptions cp;  ///< kernel threads per rank and the CP strategy
};

/// Loss and gradients of one batch on rank comm.rank() of the CP group:
///   forward: x = embed(inputs); per layer l, with RngState generator.next():
///     h = x + Wo attn(rope(q), rope(k), v) (causal, dropout; [q|k|v] = Wqkv rmsnorm(x)),
///     x = h + mlp(rmsnorm(h)); then logits = W_lm rmsnorm(x), loss = cross-entropy.
///   backward: every op's hand-written backward in reverse order, attention through
///     attention_backward (or, with recompute, after re-running the layer's forward with
///     recompute_forward and the RngState replayed from a Generator restored to the step's
///     first state).
/// Adds this rank's share of dL/dparams to `grads` (NOT all-reduced: the caller sums over ranks).
/// Returns the global mean loss over all B * S tokens (all-reduced, equal on every rank).
/// Every rank must pass identical params and generator state. All buffers are charged to
/// comm.memory(); at return no ForwardResult of this step is alive.
/// Throws what the ops and attention throw (shape errors, kRecomputeDiverged, kPeerFailed...).
double forward_backward(Communicator& comm, const ModelParams& params, const ShardBatch& shard,
                        const StepOptions& options, Generator& generator, ModelGrads& grads);

/// The forward of forward_backward alone, keeping nothing for a backward: the LM-head logits
/// [B * S_r, vocab] of this rank's rows (row n = b * S_r + i, as in ShardBatch), computed by the
/// same ops in the same order as the training forward (so equal inputs, weights and RngStates
/// give bitwise the training forward's logits). Draws one RngState per layer from `generator`;
/// pass options.dropout = 0 to evaluate or generate. options.recompute is ignored. Collective
/// over the CP group like forward_backward. Throws what forward_backward throws.
Tensor forward_logits(Communicator& comm, const ModelParams& params, const ShardBatch& shard,
                      const StepOptions& options, Generator& generator);

/// Global mean cross-entropy of the shard's targets under forward_logits (all-reduced over the
/// group: equal on every rank), e.g. the held-out loss.
double forward_loss(Communicator& comm, const ModelParams& params, const ShardBatch& shard,
                    const StepOptions& options, Generator& generator);

}  // namespace cpattn::train
