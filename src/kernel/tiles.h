// Tiling of the (q, k) plane: per-tile position/document ranges, the SKIP / FULL / PARTIAL
// classification of a tile pair, and the per-element mask of PARTIAL tiles.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernel/problem.h"

namespace cpattn::detail {

/// Rows [begin, begin + size) of one sequence tile and the ranges of their positions and
/// document ids (doc range is [0, 0] when there are no documents).
struct TileRange {
  int64_t begin = 0, size = 0;
  int64_t pos_min = 0, pos_max = 0;
  int64_t doc_min = 0, doc_max = 0;
};

/// Splits a sequence of pos.size() tokens into tiles of `tile` rows (the last may be shorter)
/// and computes each tile's ranges, once per call. doc may be empty.
std::vector<TileRange> make_tiles(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                  int64_t tile);

/// What a (q tile, k tile) pair needs: nothing, the plain product, or a per-element mask.
enum class TileKind { kSkip, kFull, kPartial };

/// The position part of the mask for one query: key position kp is visible iff
/// lo <= kp <= hi (causal: hi <= q_pos; window: q_pos - left <= kp <= q_pos + right).
struct KeyBounds {
  int64_t lo, hi;
};

/// The mask predicate of DESIGN.md section 1 on global positions and document ids.
class MaskRule {
 public:
  explicit MaskRule(const Problem& p);

  /// Bounds of visible key positions for query position q_pos; monotone in q_pos.
  KeyBounds bounds(int64_t q_pos) const;

  /// SKIP if no (i, j) of the pair is visible, FULL if every one is, else PARTIAL. Uses only the
  /// tiles' ranges: hi(q_max) < k_min or lo(q_min) > k_max or disjoint document ranges -> SKIP;
  /// hi(q_min) >= k_max and lo(q_max) <= k_min and (no documents or one shared document) -> FULL.
  TileKind classify(const TileRange& q, const TileRange& k) const;

  /// Sets x[j * stride] = -inf for every key j < k.size of the tile that query q_index may not
  /// see (PARTIAL tiles only; stride > 1 walks a column of a transposed score tile).
  void mask_keys(int64_t q_index, const TileRange& k, float* x, int64_t stride) const;

 private:
  bool causal_;
  int64_t window_left_, window_right_;
  std::span<const int64_t> q_pos_, k_pos_, q_doc_, k_doc_;
  bool has_docs_;
};

}  // namespace cpattn::detail
