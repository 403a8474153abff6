// The visibility rule of attention (docs/design.md section 1) in one place: which key a query
// may see, from global positions and document ids, and the classification of whole blocks of
// tokens from their position and document ranges. The kernel's tile skipping, every CP strategy's
// block skipping and the load-balance statistics all use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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

/// The mask predicate of AttentionParams: key j is visible to query i iff
///   (!causal || k_pos <= q_pos) && (window_left < 0 || k_pos >= q_pos - window_left)
///   && (window_right < 0 || k_pos <= q_pos + window_right) && (!docs || q_doc == k_doc).
/// Positions are >= 0 (the kernel validates them); q_pos + window_right saturates at INT64_MAX.
class MaskRule {
 public:
  /// `has_docs`: the sequences carry document ids (compared by visible() and classify()).
  MaskRule(const AttentionParams& params, bool has_docs);

  /// Bounds of visible key positions for query position q_pos; monotone in q_pos.
  KeyBounds bounds(int64_t q_pos) const;

  /// True iff key (k_pos, k_doc) is visible to query (q_pos, q_doc). Without documents the doc
  /// arguments are ignored.
  bool visible(int64_t q_pos, int64_t k_pos, int64_t q_doc, int64_t k_doc) const;

  /// kHidden if no pair (i, j) of the blocks is visible, kFull if every pair is, else kPartial.
  /// Uses only the ranges: hi(q.pos_max) < k.pos_min, lo(q.pos_min) > k.pos_max, disjoint
  /// document ranges or an empty block -> kHidden; hi(q.pos_min) >= k.pos_max and
  /// lo(q.pos_max) <= k.pos_min and (no documents or one shared document) -> kFull. Conservative:
  /// a pair classified kPartial may still turn out to have no visible element.
  BlockVisibility classify(const BlockRange& q, const BlockRange& k) const;

  bool has_docs() const { return has_docs_; }

 private:
  bool causal_;
  int64_t window_left_, window_right_;
  bool has_docs_;
};

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

}  // namespace cpattn
