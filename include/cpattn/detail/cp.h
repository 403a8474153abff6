// The detail tier of context parallelism: the ring schedule and the unchecked forward/backward
// of every strategy (docs/design.md sections 5 and 6). These take the forward's out/lse/RngState
// as plain arguments and check nothing about where they came from; programs use the safe API of
// cpattn/attention.h, which records and checks that state, and is built on these. Tests and
// benchmarks use them directly. Details and a worked example: docs/ring.md.
#pragma once

#include <cstdint>
#include <span>

#include "cpattn/communicator.h"
#include "cpattn/cp_options.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/rng.h"
#include "cpattn/tensor.h"

namespace cpattn::detail {

/// What rank r of P does at ring step s (0 <= s < P). A pure function of (rank, world, step);
/// -1 means "nothing". Forward uses the kv_* fields, backward all of them.
/// Worked example, P = 4, rank 1:
///   step 0: kv_block 1 (its own), relay it to 2, receive block 0 from 0; grad: send acc(1) to 2
///   step 1: kv_block 0, relay to 2, receive block 3 from 0; grad: recv acc(0) from 0, send to 2
///   step 2: kv_block 3, relay to 2, receive block 2 from 0; grad: recv acc(3) from 0, send to 2
///   step 3: kv_block 2, no relay (rank 2 owns it);        grad: recv acc(2) from 0, send to 2;
///           then receive its own block's finished dk/dv (acc(1)) from 0.
struct RingStep {
  int kv_block = -1;       ///< (r - s) mod P: the rank whose k/v block is computed at this step
  int kv_send_to = -1;     ///< relay kv_block here, posted before compute; -1 at the last step
  int kv_recv_from = -1;   ///< next step's block arrives from here; -1 at the last step
  int next_kv_block = -1;  ///< (r - s - 1) mod P: the block that arrives; -1 at the last step
  /// Backward: the dk/dv accumulator of kv_block (sum of the shares of ranks kv_block .. r-1, in
  /// that order) arrives from here; -1 at step 0 (the accumulator starts at this rank's share).
  int grad_recv_from = -1;
  /// Backward: after adding its share, the rank sends the accumulator here, (r + 1) mod P; at the
  /// last step that is kv_block's home rank. -1 when P == 1.
  int grad_send_to = -1;
  /// Backward, last step only: the rank's own block's finished dk/dv arrives from here (the rank
  /// that added the last share, (r - 1) mod P). -1 at other steps and when P == 1.
  int home_grad_recv_from = -1;
  friend bool operator==(const RingStep&, const RingStep&) = default;
};

/// The schedule entry of (rank, world, step). Throws Error(kInvalidArgument) unless
/// 0 <= rank < world and 0 <= step < world.
RingStep ring_step(int rank, int world, int step);

/// Forward result on one rank: out [B, Sq_r, Hq, Dv] (dense BSHD), lse fp32 [B, Hq, Sq_r] (natural
/// log, -inf for rows that see no key, the head's sink logit with sinks) and the RngState used,
/// which backward must get back.
struct CpForwardResult {
  Tensor out;
  Tensor lse;
  RngState rng;
};

/// The sizes of one CP call on this rank, as validate_cp_call found them (every strategy, the
/// kernels and the helpers trust them).
struct CpDims : AttentionDims {
  int64_t max_block = 0;  ///< the largest Sk_r over all ranks (buffer size of a travelling block)
  int rank = 0, world = 1;
};

/// The arguments of one CP call, validated once (validate_cp_call): what every strategy's
/// forward and backward take. It refers to the caller's arguments, so it lives only as long as
/// they do (within the call).
struct CpCall {
  Communicator& comm;
  ConstView q, k, v;
  const SequenceSharding& q_seq;
  const SequenceSharding& kv_seq;
  const AttentionParams& params;
  RngState rng;
  const CpOptions& options;
  CpDims d;
};

/// The state a backward reads besides the call's inputs: dout [B, Sq_r, Hq, Dv], this rank's
/// forward out [B, Sq_r, Hq, Dv] (any strides) and lse fp32 [B, Hq, Sq_r] of the whole key set.
struct BackwardState {
  ConstView dout, out;
  std::span<const float> lse;
};

/// The one validation of a CP call's arguments, made at the entry of every call (the safe API's
/// and this tier's): group vs shardings (cp_size and cp_rank equal the communicator's), the
/// shardings themselves, shapes vs local lengths (q [B, Sq_r, Hq, Dqk], k [B, Sk_r, Hkv, Dqk],
/// v [B, Sk_r, Hkv, Dv], Hq a multiple of Hkv >= 1, head dims >= 1), one dtype for q, k and v,
/// the documents rule of both shardings, resolve_params, the options (num_threads >= 1,
/// resolve_isa) and options.strategy for this group, heads and dtype (check_strategy,
/// check_strategy_dtype). Every rank checks the same things, so a bad call fails on every rank
/// before any message. Throws Error(kShapeMismatch | kInvalidArgument) naming expected vs got.
CpCall validate_cp_call(Communicator& comm, ConstView q, ConstView k, ConstView v,
                        const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                        const AttentionParams& params, RngState rng, const CpOptions& options);

/// The backward's extra arguments against the validated call: dout and out [B, Sq_r, Hq, Dv]
/// (any strides, readable) and lse of B * Hq * Sq_r floats, else Error(kShapeMismatch) naming
/// expected vs got; dout of q's dtype and out of it or fp32, else Error(kInvalidArgument) naming
/// both dtypes.
void check_backward_state(const CpCall& call, const BackwardState& state);

/// Forward of call.options.strategy on a validated call (no check repeated): out
/// [B, Sq_r, Hq, Dv] and lse fp32 [B, Hq, Sq_r] of this rank's queries in its sharding.
CpForwardResult cp_forward(const CpCall& call);

/// Backward of call.options.strategy on a validated call and a checked state (no check
/// repeated): dq, dk, dv of this rank's shard, and with sinks dsink fp32 [Hq] of every rank's
/// rows (the same bits on every rank).
AttentionGradients cp_backward(const CpCall& call, const BackwardState& state);

/// Ring forward of rank comm.rank(). Computes exactly the attention of the whole sequence
/// (docs/design.md section 1) for this rank's queries:
///   out_i = sum_{visible j, all ranks} keep_ij / (1 - p) * exp(s_ij - lse_i) * v_j
/// in P steps: at step s the kernel runs q against the k/v block of rank (r - s) mod P with that
/// block's global positions and document ids, while the next block is already in flight; the
/// blocks continue one fp32 online softmax (SoftmaxCarry, kernel.h), normalised once after the
/// last computed block, so there is no merge pass and the rounding is that of one online softmax
/// over every key (bitwise one kernel call's when the blocks split the keys at the kernel's
/// 128-key tile boundaries; otherwise its tiles are cut at the block boundaries). A sink enters
/// each row once, where its softmax finishes (a rank that computes no block takes the kernel's
/// result over no keys: lse = the sink). Blocks that the mask hides entirely (MaskRule::classify
/// of their position and document ranges, and of their runs of consecutive positions:
/// docs/design.md section 5.5) are not computed; with CpOptions::document_aware they do not even
/// travel to ranks that do not need them. \param
/// comm         the CP group; comm.size() == P and comm.rank() == cp_rank of the shardings \param q
/// [B, Sq_r, Hq, Dqk], any strides, Sq_r = q_sharding.local_length() \param k, v         [B, Sk_r,
/// Hkv, Dqk] and [B, Sk_r, Hkv, Dv], any strides,
///                     Sk_r = kv_sharding.local_length()
/// \param q_sharding   how the query sequence is split (positions, documents)
/// \param kv_sharding  how the key/value sequence is split; same cp_size and cp_rank
/// Allocations are charged to comm.memory(). Messages per rank: P - 1 sends, P - 1 receives.
/// options.strategy is not read (this is cp_attention_forward with the ring strategy).
/// Throws Error(kShapeMismatch | kInvalidArgument) on bad arguments (before any message), and the
/// communicator's kTimeout / kPeerFailed when another rank fails.
CpForwardResult ring_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                       const SequenceSharding& q_sharding,
                                       const SequenceSharding& kv_sharding,
                                       const AttentionParams& params, RngState rng,
                                       const CpOptions& options = {});

/// Ring backward of rank comm.rank(): given dout [B, Sq_r, Hq, Dv] and this rank's forward out
/// [B, Sq_r, Hq, Dv] and lse fp32 [B, Hq, Sq_r] (of the whole key set) with the forward's RngState,
/// returns the gradients (FlashAttention-2 backward, kernel.h). D_i = <dout_i, out_i> is computed
/// once; dq accumulates locally in fp32 over the P blocks in step order; each block's dk/dv
/// accumulator travels around the ring behind its k/v, every rank adding its share in rank order,
/// and reaches its home rank after step P - 1 (document-aware: straight from the last rank that
/// needs the block); the kernel adds each share into the received accumulator itself (no share
/// buffer, no add pass). The reduction order is fixed, so two runs are
/// bitwise identical. With sinks, the rank's first computed block also gives the sink gradient of
/// its rows (BackwardOptions::dsink), and one allreduce_sum over the group (in double, rank
/// order) returns their sum, dsink fp32 [Hq], the same bits on every rank. Messages per rank:
/// P - 1 k/v sends + P dk/dv sends (0 when P == 1), the same number of receives, and with sinks
/// that allreduce. Nothing checks that out, lse and rng come from the forward of these
/// inputs (attention_backward does). Throws like the forward.
AttentionGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                           ConstView k, ConstView v, ConstView out,
                                           std::span<const float> lse,
                                           const SequenceSharding& q_sharding,
                                           const SequenceSharding& kv_sharding,
                                           const AttentionParams& params, RngState rng,
                                           const CpOptions& options = {});

/// Forward of `options.strategy` on rank comm.rank(): validate_cp_call, then cp_forward
/// (ring_attention_forward for the arguments; kRing is ring_attention_forward). Returns out [B,
/// Sq_r, Hq, Dv] and lse fp32 [B, Hq, Sq_r] of this rank's queries in its sharding, whatever the
/// strategy. Messages per rank: ring P - 1; allgather P - 1; ulysses 2 (P - 1) (inputs in, results
/// out); hybrid 2 (U - 1) + R - 1. Throws like ring_attention_forward, plus Error(kInvalidArgument)
/// from check_strategy.
CpForwardResult cp_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                     const SequenceSharding& q_sharding,
                                     const SequenceSharding& kv_sharding,
                                     const AttentionParams& params, RngState rng,
                                     const CpOptions& options = {});

/// Backward of `options.strategy` from this rank's forward out and lse: validate_cp_call,
/// check_backward_state, then cp_backward (ring_attention_backward for the arguments). Returns dq,
/// dk, dv of this rank's shard, dk/dv summed over every rank's queries in a fixed order (bitwise
/// deterministic), and with sinks dsink fp32 [Hq], each rank's rows' partial (from one kernel
/// call) summed over the group by one allreduce_sum, the same bits on every rank (every
/// strategy; without sinks it is empty). Throws like the forward.
AttentionGradients cp_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                         ConstView k, ConstView v, ConstView out,
                                         std::span<const float> lse,
                                         const SequenceSharding& q_sharding,
                                         const SequenceSharding& kv_sharding,
                                         const AttentionParams& params, RngState rng,
                                         const CpOptions& options = {});

}  // namespace cpattn::detail
