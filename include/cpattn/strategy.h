// Ways to split one attention call over a CP group (docs/strategies.md): the ring (k/v blocks
// travel, ring.h), all-gather k/v, Ulysses (all-to-all from sequence shards to head shards) and a
// U x R hybrid (Ulysses inside rows of U ranks, the ring across R rows). Every strategy computes
// exactly the attention of docs/design.md section 1 with the dropout masks of cp = 1, takes the
// same sequence-sharded q/k/v and returns the same sequence-sharded out/lse/gradients; only the
// traffic, the memory and the rounding of partial sums differ. The safe API (attention.h) takes
// the strategy in AttentionOptions; the functions in cpattn::unchecked are its building blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cpattn/communicator.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/ring.h"
#include "cpattn/rng.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// How a call is split over the P ranks of its group.
struct Strategy {
  enum class Kind : int32_t {
    /// k/v blocks travel round the ring while each rank computes its queries against them
    /// (ring.h); memory O(S/P), traffic (P - 1) k/v blocks per rank.
    kRing = 0,
    /// Every rank gathers all of k/v once and computes its queries against the whole sequence;
    /// backward reduce-scatters dk/dv in rank order. Memory O(S) for k/v.
    kAllGather = 1,
    /// All-to-all from sequence shards to head shards: each rank computes Hq / P query heads
    /// over the whole sequence, then all-to-all back. Needs Hq % P == 0 and Hkv % P == 0 (kv
    /// heads sharded) or P % Hkv == 0 (each kv head replicated on P / Hkv ranks).
    kUlysses = 2,
    /// A U x R grid (U * R = P): Ulysses over the U ranks of each row (ranks r with equal
    /// r / U), the ring across the R rows (ranks with equal r % U) on the head-sharded rows.
    kHybrid = 3,
  };
  Kind kind = Kind::kRing;
  int ulysses_size = 0;  ///< kHybrid: U, ranks per row; 0 for the other kinds
  int ring_size = 0;     ///< kHybrid: R, rows; 0 for the other kinds

  static Strategy ring() { return {}; }
  static Strategy allgather() { return {Kind::kAllGather, 0, 0}; }
  static Strategy ulysses() { return {Kind::kUlysses, 0, 0}; }
  static Strategy hybrid(int ulysses_size, int ring_size) {
    return {Kind::kHybrid, ulysses_size, ring_size};
  }
  friend bool operator==(const Strategy&, const Strategy&) = default;
};

/// "ring" | "allgather" | "ulysses" | "hybrid:UxR" (e.g. "hybrid:2x4").
std::string strategy_name(const Strategy& strategy);
/// Inverse of strategy_name. Throws Error(kInvalidArgument) naming the accepted forms for
/// anything else (including hybrid sizes < 1).
Strategy parse_strategy(std::string_view name);

/// Checks that `strategy` can run a call with Hq query and Hkv key/value heads on a group of
/// cp_size ranks. Throws Error(kInvalidArgument) naming the rule: hybrid sizes < 1 or
/// U * R != cp_size; Ulysses (over P = cp_size, or the U ranks of a hybrid row) needs
/// Hq % P == 0 and Hkv % P == 0 or P % Hkv == 0; sizes of 0 for a non-hybrid kind.
void check_strategy(const Strategy& strategy, int cp_size, int64_t Hq, int64_t Hkv);

/// Checks that `strategy` takes tensors of `dtype`: every strategy takes fp32; bf16 and fp16
/// (cpattn/dtype.h) run on the ring only (docs/design.md section 1.1). Throws
/// Error(kInvalidArgument) naming the strategy, the dtype and the ring.
void check_strategy_dtype(const Strategy& strategy, DType dtype);

/// The options of the safe API's calls (attention.h, recompute.h): the ring's execution knobs
/// (RingOptions: threads, statistics, the document-aware relay) plus the strategy and the call
/// site. A RingOptions converts to it (strategy ring), so code written for the ring keeps
/// compiling.
struct AttentionOptions : RingOptions {
  AttentionOptions() = default;
  AttentionOptions(const RingOptions& ring)  // NOLINT(google-explicit-constructor)
      : RingOptions(ring) {}
  Strategy strategy{};
  /// Where the call comes from, in the caller's words: a layer index, a module path
  /// ("model.layers.3.attn"). Empty (the default): the source location of the attention_forward /
  /// attention_backward / recompute_* call, "file.cpp:123" (file name without its directory, so
  /// builds of one source in other directories agree). The call agreement compares it, so a rank
  /// that skipped a call fails at the call that follows, on every rank, naming both sites
  /// (docs/design.md section 6). Ignored by the unchecked tier.
  std::string call_site;
};

namespace unchecked {

/// Forward of `options.strategy` on rank comm.rank() (ring.h for the arguments; kRing is
/// ring_attention_forward). Returns out [B, Sq_r, Hq, Dv] and lse fp32 [B, Hq, Sq_r] of this
/// rank's queries in its sharding, whatever the strategy. Messages per rank: ring P - 1;
/// allgather P - 1; ulysses 2 (P - 1) (inputs in, results out); hybrid 2 (U - 1) + R - 1.
/// Throws like ring_attention_forward, plus Error(kInvalidArgument) from check_strategy.
RingForwardResult strategy_attention_forward(Communicator& comm, ConstView q, ConstView k,
                                             ConstView v, const SequenceSharding& q_sharding,
                                             const SequenceSharding& kv_sharding,
                                             const AttentionParams& params, RngState rng,
                                             const AttentionOptions& options = {});

/// Backward of `options.strategy` from this rank's forward out and lse (ring.h's
/// ring_attention_backward for the arguments). Returns dq, dk, dv of this rank's shard, dk/dv
/// summed over every rank's queries in a fixed order (bitwise deterministic). Throws like the
/// forward.
AttentionGradients strategy_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                               ConstView k, ConstView v, ConstView out,
                                               std::span<const float> lse,
                                               const SequenceSharding& q_sharding,
                                               const SequenceSharding& kv_sharding,
                                               const AttentionParams& params, RngState rng,
                                               const AttentionOptions& options = {});

}  // namespace unchecked

}  // namespace cpattn
