// Moving tensors between the sequence-sharded side (each rank holds all heads of its tokens, the
// caller's layout) and the head-sharded side (each rank holds some heads of a group's tokens),
// the all-to-all of the Ulysses and hybrid strategies and the all-gather / reduce-scatter of the
// allgather strategy.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cp/ring_detail.h"
#include "cp/workspace_lease.h"
#include "cpattn/layout.h"

namespace cpattn::detail {

/// The tokens a group of ranks holds together, in global token order (ascending global token
/// index: for a whole group, the unsharded sequence), with their positions and document ids.
struct TokenUnion {
  std::vector<int64_t> pos;  ///< global position of each row of the union
  std::vector<int64_t> doc;  ///< document id of each row (empty: one document)
  /// rows[m][i]: the union row of local token i of the group's member m.
  std::vector<std::vector<int64_t>> rows;
  int64_t length() const { return static_cast<int64_t>(pos.size()); }
};

/// The union of the shards of `seq` held by the cp ranks `members` (member m = members[m]).
TokenUnion token_union(const SequenceSharding& seq, std::span<const int> members);

/// Heads [begin, begin + count) of a tensor.
struct HeadRange {
  int64_t begin = 0, count = 0;
};

/// The head assignment of Ulysses over a group of `parts` ranks (docs/strategies.md): rank c
/// computes query heads [c Hq / n, (c + 1) Hq / n); kv heads are sharded alike when
/// Hkv % n == 0, and otherwise (n % Hkv == 0) rank c holds the one kv head its query heads use,
/// replicated on n / Hkv ranks. Either way local query head h uses local kv head h / (Hq_l /
/// Hkv_l), the kernel's GQA rule, so one kernel call serves a rank.
class HeadSplit {
 public:
  /// Throws Error(kInvalidArgument) unless Hq % parts == 0 and (Hkv % parts == 0 or
  /// parts % Hkv == 0), naming `what` (e.g. "ulysses over 4 ranks").
  HeadSplit(int64_t Hq, int64_t Hkv, int parts, const char* what);
  HeadRange q(int c) const { return {c * (hq_ / n_), hq_ / n_}; }
  HeadRange kv(int c) const;
  /// Several ranks hold the same kv head (their dk/dv are summed in rank order).
  bool kv_replicated() const { return hkv_ % n_ != 0; }
  std::vector<HeadRange> q_all() const;
  std::vector<HeadRange> kv_all() const;

 private:
  int64_t hq_, hkv_;
  int n_;
};

/// One tensor of a transposition: `from` is read, `to` written, on the sides the function says.
/// heads[c] is the head range rank c of the group holds on the head-sharded side.
struct HeadPart {
  const TokenUnion* tokens = nullptr;
  std::vector<HeadRange> heads;
  ConstView from;
  View to;
  /// to_sequence only: several ranks hold the same heads (replicated kv heads, allgather): the
  /// sequence side gets their sum, in rank order.
  bool sum = false;
};

/// An lse-like fp32 array [B, H, S] seen as a [B, S, H, 1] view (so it moves like a tensor).
View rows_view(std::span<float> x, int64_t B, int64_t H, int64_t S);
ConstView rows_view(std::span<const float> x, int64_t B, int64_t H, int64_t S);

/// Sequence side -> head side, one message per pair of ranks for all parts: every part's `from`
/// is this rank's [B, S_m, H, D] (S_m = tokens->rows[rank].size()), its `to` this rank's
/// [B, S_union, heads[rank].count, D], filled at the union rows of every member's tokens. The own
/// block is copied straight across; the others are packed into and unpacked from staging buffers
/// borrowed from `lease` (kStageSend, kStageRecv; done() when the call returns).
void to_heads(CpChannel& channel, WorkspaceLease& lease, int rank, int world, int phase,
              std::span<const HeadPart> parts);

/// Head side -> sequence side: every part's `from` is this rank's [B, S_union, heads[rank].count,
/// D], its `to` this rank's [B, S_m, H, D] (overwritten; sum parts are the rank-order sums).
/// Staging as to_heads.
void to_sequence(CpChannel& channel, WorkspaceLease& lease, int rank, int world, int phase,
                 std::span<const HeadPart> parts);

}  // namespace cpattn::detail
