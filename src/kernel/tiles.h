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
  int64_t index = 0;  ///< the tile's number in its sequence (0, 1, ...)
  BlockRange range;
  bool consecutive = false;  ///< positions rise by exactly 1 from row to row
};

/// A rectangle of rows of a (query tile, key tile) pair, half-open: query rows [q_begin, q_end),
/// key rows [k_begin, k_end).
struct TileBox {
  int64_t q_begin, q_end, k_begin, k_end;
  bool empty() const { return q_begin >= q_end || k_begin >= k_end; }
};

/// The tiles of tile_spans (cpattn/mask.h: at most `tile` rows, ending early at document
/// boundaries and position jumps) with each tile's ranges, once per call. doc may be empty.
std::vector<TileRange> make_tiles(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                  int64_t tile);

/// The mask of one kernel call: MaskRule plus the call's positions and document ids, and, when
/// the call has mask slices, the slices each query tile meets (found once per call, so that a
/// tile pair or a row looks at those only).
class TileMask {
 public:
  /// `q_tiles`: the call's query tiles (make_tiles of q_pos), by which classify and mask_keys
  /// are called.
  TileMask(const Problem& p, std::span<const TileRange> q_tiles);

  /// MaskRule::classify of the two tiles' ranges.
  BlockVisibility classify(const TileRange& q, const TileRange& k) const {
    if (!rule_.has_slices()) return rule_.classify(q.range, k.range);
    return rule_.classify(q.range, k.range, slices_of_(q));
  }

  /// Sets x[j * stride] = -inf for every key j < k.size of the tile that query q_index (a row of
  /// query tile q) may not see (partially visible tiles only; stride > 1 walks a column of a
  /// transposed score tile).
  void mask_keys(const TileRange& q, int64_t q_index, const TileRange& k, float* x,
                 int64_t stride) const;

  /// The rows of a tile pair that can hold a visible pair: every visible (query row i, key row j)
  /// of tiles q and k has q_begin <= i < q_end and k_begin <= j < k_end (rows of the tiles,
  /// counted from 0). From the position bounds of each query row (MaskRule::bounds), so it may
  /// hold pairs that documents or slices hide; empty when no row can see a key of k. A product
  /// over a partially visible tile may run on the box alone: every score outside it is masked.
  TileBox visible_box(const TileRange& q, const TileRange& k) const;

 private:
  std::span<const uint32_t> slices_of_(const TileRange& q) const {
    return q_tile_slices_[static_cast<size_t>(q.index)];
  }

  MaskRule rule_;
  std::span<const int64_t> q_pos_, k_pos_, q_doc_, k_doc_;
  std::vector<std::vector<uint32_t>> q_tile_slices_;  ///< [q tile]: MaskRule::slices_meeting
};

}  // namespace cpattn::detail
