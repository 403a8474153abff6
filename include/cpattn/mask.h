// The visibility rule of attention (docs/design.md section 1) in one place: which key a query
// may see, from global positions and document ids, and the classification of whole blocks of
// tokens from their position and document ranges. The kernel's tile skipping, every CP strategy's
// block skipping and the load-balance statistics all use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cpattn/params.h"

namespace cpattn {

/// The ranges of a block of tokens' global positions and document ids. doc_min = doc_max = 0 when
/// the sequence has no documents; `empty` blocks hold no token (and hide every pair).
struct BlockRange {
  int64_t pos_min = 0, pos_max = 0;
  int64_t doc_min = 0, doc_max = 0;
  bool empty = true;
};
/// The ranges of pos (and doc, empty for one document; else doc.size() == pos.size()).
BlockRange block_range(std::span<const int64_t> pos, std::span<const int64_t> doc);

/// What a (query block, key block) pair needs: nothing, the plain product, or a per-element mask.
enum class BlockVisibility {
  kHidden,   ///< no pair is visible
  kFull,     ///< every pair is visible
  kPartial,  ///< some pairs are visible
};

/// The position part of the mask for one query: key position kp is visible iff lo <= kp <= hi.
struct KeyBounds {
  int64_t lo, hi;
};

/// The visible region of a MaskSlice (params.h) as a rectangle and a diagonal band, all bounds
/// inclusive: query positions [q_lo, q_hi], key positions [k_lo, k_hi], and the diagonal
/// d = kp - qp in [d_lo, d_hi] (INT64_MIN / INT64_MAX when unbounded). Every slice type is one of
/// these; so is the intersection of two.
struct SliceRegion {
  int64_t q_lo = 0, q_hi = -1, k_lo = 0, k_hi = -1;
  int64_t d_lo = 0, d_hi = 0;
  /// The region of `slice` (its half-open ranges made inclusive, its type made a band).
  static SliceRegion of(const MaskSlice& slice);
  /// True iff no (qp, kp) lies in the region: an empty rectangle, an empty band, or a band that
  /// misses the rectangle's diagonals [k_lo - q_hi, k_hi - q_lo] (a rectangle of integer points
  /// holds every diagonal between those two).
  bool empty() const;
  /// The pairs in both regions.
  SliceRegion intersect(const SliceRegion& other) const;
  /// True iff (qp, kp) lies in the region.
  bool contains(int64_t qp, int64_t kp) const;
  /// The keys query position qp sees through the region: [lo, hi], empty (lo > hi) when qp is
  /// outside [q_lo, q_hi] (bounds saturate instead of overflowing).
  KeyBounds keys_of(int64_t qp) const;
};

/// The mask predicate of AttentionParams: key j is visible to query i iff
///   (!causal || k_pos <= q_pos) && (window_left < 0 || k_pos >= q_pos - window_left)
///   && (window_right < 0 || k_pos <= q_pos + window_right) && (!docs || q_doc == k_doc)
///   && (no slices || some slice's region holds (q_pos, k_pos)).
/// Positions are >= 0 (the kernel validates them); q_pos + window_right saturates at INT64_MAX.
/// Slices are taken as resolve_params checked them (at most one holds any pair).
class MaskRule {
 public:
  /// `has_docs`: the sequences carry document ids (compared by visible() and classify()).
  MaskRule(const AttentionParams& params, bool has_docs);

  /// Bounds of visible key positions for query position q_pos from causal and the windows (the
  /// slices and documents are not included); monotone in q_pos.
  KeyBounds bounds(int64_t q_pos) const;

  /// True iff key (k_pos, k_doc) is visible to query (q_pos, q_doc). Without documents the doc
  /// arguments are ignored.
  bool visible(int64_t q_pos, int64_t k_pos, int64_t q_doc, int64_t k_doc) const;

  /// kHidden if no pair (i, j) of the blocks is visible, kFull if every pair is, else kPartial.
  /// Uses only the ranges: hi(q.pos_max) < k.pos_min, lo(q.pos_min) > k.pos_max, disjoint
  /// document ranges, an empty block, or (with slices) no slice region meeting the box
  /// [q.pos_min, q.pos_max] x [k.pos_min, k.pos_max] -> kHidden; hi(q.pos_min) >= k.pos_max and
  /// lo(q.pos_max) <= k.pos_min and (no documents or one shared document) and (no slices or one
  /// slice region holding the whole box) -> kFull. Conservative: a pair classified kPartial may
  /// still turn out to have no visible element, and boxes covered by several slices together are
  /// kPartial.
  BlockVisibility classify(const BlockRange& q, const BlockRange& k) const;

  /// classify() with only the slices listed in `slices` (indices into slice_regions()), for a
  /// caller that classifies many key blocks against one query block: pass slices_meeting(q).
  BlockVisibility classify(const BlockRange& q, const BlockRange& k,
                           std::span<const uint32_t> slices) const;

  /// The indices of the slice regions that hold some pair with a query position in
  /// [q.pos_min, q.pos_max] (all that any key can be visible through for these queries).
  std::vector<uint32_t> slices_meeting(const BlockRange& q) const;

  bool has_docs() const { return has_docs_; }
  bool has_slices() const { return !slices_.empty(); }
  /// The regions of the params' slices, in their order.
  std::span<const SliceRegion> slice_regions() const { return slices_; }

 private:
  BlockVisibility classify_without_slices(const BlockRange& q, const BlockRange& k) const;

  bool causal_;
  int64_t window_left_, window_right_;
  bool has_docs_;
  std::vector<SliceRegion> slices_;
};

/// Refuses slices that make one pair visible twice: Error(kInvalidArgument) naming the two
/// slices (by index and ranges) and a pair both make visible. Sorts by q_begin and compares only
/// slices whose query ranges overlap. (resolve_params calls it; params.h states the rule.)
void check_slices_disjoint(std::span<const MaskSlice> slices);

/// The precondition of the document part of the rule, the same in every tier (kernel, ring,
/// every strategy, the safe API): document ids are given for the queries and the keys, or for
/// neither; a side without tokens counts as either, since its list is empty whatever it means
/// (Sq = 0 with key documents is a valid call). q_docs / k_docs: the number of ids given; q_len
/// / k_len: the tokens they are for. Throws Error(kInvalidArgument) naming `what` and the counts.
void check_documents_together(size_t q_docs, size_t k_docs, int64_t q_len, int64_t k_len,
                              const char* what);

/// Number of (query, key) pairs the mask leaves visible (exact, O(Sq * Sk)): load-balance
/// statistics. q_doc/k_doc: both empty (one document) or of the lengths of q_pos/k_pos.
int64_t count_visible_pairs(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                            std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                            const AttentionParams& params);

/// Rows [begin, begin + size) of one tile of a sequence: the kernel's unit of work and of its
/// mask's classification (tile_spans).
struct TileSpan {
  int64_t begin = 0, size = 0;
};

/// The kernel's tiling of a sequence of pos.size() tokens (doc: empty, or one id per token):
/// consecutive tiles of at most `tile` rows (>= 1) that end early at run boundaries (another
/// document id, or a position jump of more than `tile` or backwards): a tile that starts a run
/// ends at the first boundary once it holds tile / 4 rows (runs shorter than that, tiny
/// documents, share a tile rather than make tiny ones); a tile that continues a run cut by the
/// size ends where the run does. A tile that straddled two documents, or the two zigzag chunks of
/// one, would be classified by a range box of mostly invisible pairs and computed in full. One
/// run (one document, consecutive positions): tiles of exactly `tile` rows, the last shorter. The
/// kernel (src/kernel/tiles.cpp), the planner's compute model and the benchmarks tile with it.
std::vector<TileSpan> tile_spans(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                 int64_t tile);

/// Number of (query, key) pairs a kernel call computes: those of the pairs of q_tile x k_tile
/// tiles (tile_spans) that MaskRule::classify does not hide, partially visible tiles counted
/// whole: the work behind count_visible_pairs' pairs. Arguments as count_visible_pairs.
int64_t count_computed_pairs(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                             std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                             const AttentionParams& params, int64_t q_tile, int64_t k_tile);

}  // namespace cpattn
