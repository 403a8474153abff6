// The mask rule and block classification (mask.h).
#include "cpattn/mask.h"

#include <algorithm>
#include <limits>

#include "cpattn/error.h"

namespace cpattn {

void check_documents_together(size_t q_docs, size_t k_docs, int64_t q_len, int64_t k_len,
                              const char* what) {
  CPATTN_CHECK((q_docs == 0) == (k_docs == 0) || q_len == 0 || k_len == 0,
               ErrorCode::kInvalidArgument, what,
               ": document ids must be given for both the queries and the keys or for neither, "
               "got ",
               q_docs, " for ", q_len, " queries and ", k_docs, " for ", k_len, " keys");
}

BlockRange block_range(std::span<const int64_t> pos, std::span<const int64_t> doc) {
  BlockRange r;
  if (pos.empty()) return r;
  const auto [pmin, pmax] = std::minmax_element(pos.begin(), pos.end());
  r.pos_min = *pmin;
  r.pos_max = *pmax;
  if (!doc.empty()) {
    const auto [dmin, dmax] = std::minmax_element(doc.begin(), doc.end());
    r.doc_min = *dmin;
    r.doc_max = *dmax;
  }
  r.empty = false;
  return r;
}

MaskRule::MaskRule(const AttentionParams& params, bool has_docs)
    : causal_(params.causal),
      window_left_(params.window_left),
      window_right_(params.window_right),
      has_docs_(has_docs) {}

KeyBounds MaskRule::bounds(int64_t q_pos) const {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  KeyBounds b{std::numeric_limits<int64_t>::min(), kMax};
  // Positions and windows are >= 0, so q_pos - left cannot overflow; q_pos + right saturates.
  if (window_left_ >= 0) b.lo = q_pos - window_left_;
  if (window_right_ >= 0) b.hi = window_right_ > kMax - q_pos ? kMax : q_pos + window_right_;
  if (causal_) b.hi = std::min(b.hi, q_pos);
  return b;
}

bool MaskRule::visible(int64_t q_pos, int64_t k_pos, int64_t q_doc, int64_t k_doc) const {
  const KeyBounds b = bounds(q_pos);
  return k_pos >= b.lo && k_pos <= b.hi && (!has_docs_ || q_doc == k_doc);
}

BlockVisibility MaskRule::classify(const BlockRange& q, const BlockRange& k) const {
  if (q.empty || k.empty) return BlockVisibility::kHidden;
  if (has_docs_ && (q.doc_max < k.doc_min || k.doc_max < q.doc_min)) {
    return BlockVisibility::kHidden;
  }
  const KeyBounds first = bounds(q.pos_min), last = bounds(q.pos_max);
  if (last.hi < k.pos_min || first.lo > k.pos_max) return BlockVisibility::kHidden;
  const bool one_doc =
      !has_docs_ || (q.doc_min == q.doc_max && k.doc_min == k.doc_max && q.doc_min == k.doc_min);
  if (one_doc && first.hi >= k.pos_max && last.lo <= k.pos_min) return BlockVisibility::kFull;
  return BlockVisibility::kPartial;
}

int64_t count_visible_pairs(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                            std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                            const AttentionParams& params) {
  const bool docs = !q_doc.empty() && !k_doc.empty();
  const MaskRule rule(params, docs);
  int64_t n = 0;
  for (size_t i = 0; i < q_pos.size(); ++i) {
    const int64_t qd = docs ? q_doc[i] : 0;
    for (size_t j = 0; j < k_pos.size(); ++j) {
      n += rule.visible(q_pos[i], k_pos[j], qd, docs ? k_doc[j] : 0);
    }
  }
  return n;
}

}  // namespace cpattn
