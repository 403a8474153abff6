// Tiling of the (q, k) plane: per-tile position/document ranges, and the kernel's use of the one
// mask rule (cpattn/mask.h): the classification of a tile pair and the per-element mask of
// partially visible tiles.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpattn/mask.h"
#include "kernel/problem.h"

namespace cpattn::detail {

/// Rows [begin, begin + size) of one sequence tile and the ranges of their positions and
/// document ids.
struct TileRange {
  int64_t begin = 0, size = 0;
  BlockRange range;
};

/// Splits a sequence of pos.size() tokens into tiles of `tile` rows (the last may be shorter)
/// and computes each tile's ranges, once per call. doc may be empty.
std::vector<TileRange> make_tiles(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                  int64_t tile);

/// The mask of one kernel call: MaskRule plus the call's positions and document ids.
class TileMask {
 public:
  explicit TileMask(const Problem& p);

  /// MaskRule::classify of the two tiles' ranges.
  BlockVisibility classify(const TileRange& q, const TileRange& k) const {
    return rule_.classify(q.range, k.range);
  }

  /// Sets x[j * stride] = -inf for every key j < k.size of the tile that query q_index may not
  /// see (partially visible tiles only; stride > 1 walks a column of a transposed score tile).
  void mask_keys(int64_t q_index, const TileRange& k, float* x, int64_t stride) const;

 private:
  MaskRule rule_;
  std::span<const int64_t> q_pos_, k_pos_, q_doc_, k_doc_;
};

}  // namespace cpattn::detail
