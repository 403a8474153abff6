// Ring context-parallel attention (docs/design.md section 5): the ring schedule, the fp32 merge of
// partial results, the ring's options and statistics, and, in namespace cpattn::unchecked, the
// ring forward/backward entry points themselves. Those take the forward's out/lse/RngState as
// plain arguments and check nothing about where they came from: programs use the safe API of
// attention.h, which records and checks that state. Details and a worked example: docs/ring.md.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>

#include "cpattn/communicator.h"
#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/rng.h"
#include "cpattn/tensor.h"

namespace cpattn {

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

/// Merges two partial attention results over disjoint key sets (fp32, -inf is the identity). A
/// utility for callers that combine normalised partial results of their own; the ring does not
/// use it (its blocks continue one online softmax, SoftmaxCarry in kernel.h, so its rounding does
/// not grow with P):
///   lse = m + log(exp(a - m) + exp(b - m)), m = max(a, b)  (computed as m + log1p(exp(min - m)))
///   out = out_a * exp(a - lse) + out_b * exp(b - lse)
/// a = b = -inf gives lse = -inf and leaves out unchanged (no NaN).
float merge_lse(float lse_a, float lse_b);
/// acc <- merge(acc, part) for every row: out_acc/out_part [B, S, H, Dv] (any strides),
/// lse_acc/lse_part fp32 [B, H, S] contiguous. Throws Error(kShapeMismatch) on differing shapes.
void merge_attention_partials(View out_acc, std::span<float> lse_acc, ConstView out_part,
                              std::span<const float> lse_part);

/// Where one call's time went on this rank (filled when RingOptions.stats is set), for the ring
/// and every other CP strategy (strategy.h).
struct RingStats {
  double kernel_seconds = 0;  ///< inside attention kernel calls
  double comm_seconds = 0;    ///< inside isend/irecv/wait (blocked or copying: not hidden)
  double other_seconds = 0;   ///< packing, merging, delta, gradient sums
  int64_t messages_sent = 0;
  int64_t bytes_sent = 0;
  /// What the plain ring (every k/v block visits every rank, every dk/dv accumulator goes all the
  /// way round) sends for the ring steps of this call; bytes_sent / bytes_sent_plain_ring is the
  /// document-aware ring's share (RingOptions::document_aware). 0 for strategies without a ring.
  int64_t bytes_sent_plain_ring = 0;
  int64_t blocks_computed = 0;  ///< kernel calls
  int64_t blocks_skipped = 0;   ///< blocks the masks hide entirely (or empty ones)
};

namespace detail {
class WorkspaceLease;
}

/// Reusable buffers for the calls of every CP strategy, owned by the caller
/// (RingOptions::workspace; AttentionOptions inherits it). A call borrows from here what it
/// would otherwise allocate and free: the ring its travelling k/v blocks, dk/dv accumulators and
/// finished dk/dv (5 k/v blocks of the largest rank: 320 MiB per rank at S = 16384, P = 2,
/// Hkv = 8, D = 128 in fp32; with direct blocks also the packed own block and the returned dk/dv
/// shares), Ulysses and the hybrid their head-side q, k, v, dout, out, lse, D and gradients,
/// allgather its gathered k/v and their dk/dv, and those three the staging of their
/// all-to-alls. The results a call returns
/// (out, lse, dq, dk, dv) are never in the workspace. Without a workspace every call gets fresh
/// memory, which the operating system faults in and zeroes page by page (docs/performance.md,
/// "Ring"); with one kept per rank across layers and steps, only the first call does. The
/// buffers grow to the largest call and are kept until release() or destruction. It is not a
/// cache: no result or state lives here, every call writes a buffer before it reads it, and the
/// contents between calls are meaningless. One call at a time: a call that finds the workspace in
/// use by another throws Error(kInvalidArgument). Its bytes are charged to the MemoryCounter given
/// at construction (process_memory() if null) from allocation until release.
class AttentionWorkspace {
 public:
  explicit AttentionWorkspace(MemoryCounter* counter = nullptr) : counter_(counter) {}
  AttentionWorkspace(const AttentionWorkspace&) = delete;
  AttentionWorkspace& operator=(const AttentionWorkspace&) = delete;

  /// Bytes held now. Read it between calls (not concurrently with one, which may grow a buffer).
  int64_t bytes() const noexcept;
  /// Frees every buffer. Throws Error(kInvalidArgument) while a call uses the workspace; a call
  /// that starts while release() runs throws the same "in use" error.
  void release();

 private:
  friend class detail::WorkspaceLease;
  static constexpr int kBuffers = 19;  ///< detail::WorkspaceBuffer's values
  MemoryCounter* counter_;
  std::array<Tensor, kBuffers> buffers_;
  std::atomic<bool> in_use_{false};
};

/// Execution knobs of a ring call (never change the math: results are bitwise the same for any
/// value of document_aware and with or without a workspace).
struct RingOptions {
  /// Kernel threads per rank (>= 1). In-process ranks (ThreadCommunicator) pass 1.
  int num_threads = 1;
  /// When non-null, the call adds its timings and counts here (caller-owned, per rank).
  RingStats* stats = nullptr;
  /// Document-aware routing (docs/strategies.md, "Document-aware ring"): from the position and
  /// document ranges of every rank (MaskRule::classify, the ring's block skip), a k/v block
  /// travels round the ring only as far as the last rank that needs it, and its dk/dv
  /// accumulator returns from there straight to its home rank; a block that at most two other
  /// ranks need, with a rank on the way that does not, goes straight from its home to them, and
  /// their dk/dv shares come straight back and are added at home in ring order. Saves traffic
  /// with packed documents, windows and causal masks on contiguous layouts. false: the plain
  /// ring.
  bool document_aware = true;
  /// The kernel's code path for every block (KernelOptions::isa; resolved once per call).
  Isa isa = Isa::kAuto;
  /// Buffers to borrow instead of allocating (AttentionWorkspace; caller-owned, one call at a
  /// time), for every strategy. null: each call allocates its own.
  AttentionWorkspace* workspace = nullptr;
  /// A stop request of the caller's (a flag its signal handler sets; caller-owned, outlives the
  /// call): once it is true, the call throws Error(kInterrupted) at its next interruption point
  /// (before each kernel work item and ring step), so a long call stops within one tile. The
  /// call's outputs are then unspecified; its inputs and every ForwardResult are untouched.
  /// null: no stop request.
  const std::atomic<bool>* stop_requested = nullptr;
};

/// Throws Error(kInterrupted) "stopped by request" when options.stop_requested is set and true;
/// the check of the calls' interruption points, for callers that want the same check between
/// their own pieces of work.
void throw_if_stop_requested(const RingOptions& options);

namespace unchecked {

/// Forward result on one rank: out [B, Sq_r, Hq, Dv] (dense BSHD), lse fp32 [B, Hq, Sq_r] (natural
/// log, -inf for rows that see no key) and the RngState used, which backward must get back.
struct RingForwardResult {
  Tensor out;
  Tensor lse;
  RngState rng;
};

/// Checks the arguments of a ring call the way ring_attention_forward does before any message
/// (group vs shardings, shapes vs local lengths, parameters, options); throws the same errors.
void check_ring_arguments(const Communicator& comm, ConstView q, ConstView k, ConstView v,
                          const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                          const AttentionParams& params, const RingOptions& options = {});

/// check_ring_arguments plus what a backward reads besides: dout and out of shape [B, Sq_local,
/// Hq, Dv] and readable, dout in q's dtype, out in q's dtype or fp32, lse of B * Hq * Sq_local
/// floats. Every strategy's backward makes these checks; throws the same errors.
void check_backward_arguments(const Communicator& comm, ConstView dout, ConstView q, ConstView k,
                              ConstView v, ConstView out, std::span<const float> lse,
                              const SequenceSharding& q_sharding,
                              const SequenceSharding& kv_sharding, const AttentionParams& params,
                              const RingOptions& options = {});

/// Ring forward of rank comm.rank(). Computes exactly the attention of the whole sequence
/// (docs/design.md section 1) for this rank's queries:
///   out_i = sum_{visible j, all ranks} keep_ij / (1 - p) * exp(s_ij - lse_i) * v_j
/// in P steps: at step s the kernel runs q against the k/v block of rank (r - s) mod P with that
/// block's global positions and document ids, while the next block is already in flight; the
/// blocks continue one fp32 online softmax (SoftmaxCarry, kernel.h), normalised once after the
/// last computed block, so there is no merge pass and the rounding is that of one online softmax
/// over every key (bitwise one kernel call's when the blocks split the keys at the kernel's
/// 128-key tile boundaries; otherwise its tiles are cut at the block boundaries). Blocks that the
/// mask hides entirely (MaskRule::classify of their position and document ranges) are not computed;
/// with RingOptions::document_aware they do not even travel to ranks that do not need them. \param
/// comm         the CP group; comm.size() == P and comm.rank() == cp_rank of the shardings \param q
/// [B, Sq_r, Hq, Dqk], any strides, Sq_r = q_sharding.local_length() \param k, v         [B, Sk_r,
/// Hkv, Dqk] and [B, Sk_r, Hkv, Dv], any strides,
///                     Sk_r = kv_sharding.local_length()
/// \param q_sharding   how the query sequence is split (positions, documents)
/// \param kv_sharding  how the key/value sequence is split; same cp_size and cp_rank
/// Allocations are charged to comm.memory(). Messages per rank: P - 1 sends, P - 1 receives.
/// Throws Error(kShapeMismatch | kInvalidArgument) on bad arguments (before any message), and the
/// communicator's kTimeout / kPeerFailed when another rank fails.
RingForwardResult ring_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                         const SequenceSharding& q_sharding,
                                         const SequenceSharding& kv_sharding,
                                         const AttentionParams& params, RngState rng,
                                         const RingOptions& options = {});

/// Ring backward of rank comm.rank(): given dout [B, Sq_r, Hq, Dv] and this rank's forward out
/// [B, Sq_r, Hq, Dv] and lse fp32 [B, Hq, Sq_r] (of the whole key set) with the forward's RngState,
/// returns the gradients (FlashAttention-2 backward, kernel.h). D_i = <dout_i, out_i> is computed
/// once; dq accumulates locally in fp32 over the P blocks in step order; each block's dk/dv
/// accumulator travels around the ring behind its k/v, every rank adding its share in rank order,
/// and reaches its home rank after step P - 1 (document-aware: straight from the last rank that
/// needs the block); the kernel adds each share into the received accumulator itself (no share
/// buffer, no add pass). The reduction order is fixed, so two runs are
/// bitwise identical. Messages per rank: P - 1 k/v sends + P dk/dv sends (0 when P == 1), the
/// same number of receives. Nothing checks that out, lse and rng come from the forward of these
/// inputs (attention_backward does). Throws like the forward.
AttentionGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                           ConstView k, ConstView v, ConstView out,
                                           std::span<const float> lse,
                                           const SequenceSharding& q_sharding,
                                           const SequenceSharding& kv_sharding,
                                           const AttentionParams& params, RngState rng,
                                           const RingOptions& options = {});

}  // namespace unchecked

}  // namespace cpattn
