// Ways to split one attention call over a CP group (docs/strategies.md): the ring (k/v blocks
// travel, docs/ring.md), all-gather k/v, Ulysses (all-to-all from sequence shards to head shards)
// and a U x R hybrid (Ulysses inside rows of U ranks, the ring across R rows). Every strategy
// computes exactly the attention of docs/design.md section 1 with the dropout masks of cp = 1,
// takes the same sequence-sharded q/k/v and returns the same sequence-sharded out/lse/gradients;
// only the traffic, the memory and the rounding of partial sums differ. The safe API (attention.h)
// takes the strategy in CpOptions (cp_options.h); cpattn/detail/cp.h has its building blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cpattn/dtype.h"

namespace cpattn {

/// How a call is split over the P ranks of its group.
struct Strategy {
  enum class Kind : int32_t {
    /// k/v blocks travel round the ring while each rank computes its queries against them
    /// (docs/ring.md); memory O(S/P), traffic (P - 1) k/v blocks per rank.
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

}  // namespace cpattn
