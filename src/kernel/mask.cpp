// The mask rule and block classification (mask.h).
#include "cpattn/mask.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

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

namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// a + b, saturated at the int64 bounds.
int64_t add_saturated(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? kMax : kMin;
  return r;
}

}  // namespace

SliceRegion SliceRegion::of(const MaskSlice& s) {
  SliceRegion r;
  r.q_lo = s.q_begin;
  r.q_hi = s.q_end - 1;
  r.k_lo = s.k_begin;
  r.k_hi = s.k_end - 1;
  const bool lower = s.type == SliceType::kInverseCausal || s.type == SliceType::kBiCausal;
  const bool upper = s.type == SliceType::kCausal || s.type == SliceType::kBiCausal;
  // Positions are >= 0, so these differences cannot overflow.
  r.d_lo = lower ? s.k_begin - s.q_begin : kMin;
  r.d_hi = upper ? s.k_end - s.q_end : kMax;
  return r;
}

bool SliceRegion::empty() const {
  if (q_lo > q_hi || k_lo > k_hi || d_lo > d_hi) return true;
  // Every position is >= 0 here, so the rectangle's diagonal range fits in int64.
  return k_lo - q_hi > d_hi || k_hi - q_lo < d_lo;
}

SliceRegion SliceRegion::intersect(const SliceRegion& o) const {
  return {std::max(q_lo, o.q_lo), std::min(q_hi, o.q_hi), std::max(k_lo, o.k_lo),
          std::min(k_hi, o.k_hi), std::max(d_lo, o.d_lo), std::min(d_hi, o.d_hi)};
}

bool SliceRegion::contains(int64_t qp, int64_t kp) const {
  return qp >= q_lo && qp <= q_hi && kp >= k_lo && kp <= k_hi && kp - qp >= d_lo && kp - qp <= d_hi;
}

KeyBounds SliceRegion::keys_of(int64_t qp) const {
  if (qp < q_lo || qp > q_hi) return {0, -1};
  return {std::max(k_lo, add_saturated(qp, d_lo)), std::min(k_hi, add_saturated(qp, d_hi))};
}

MaskRule::MaskRule(const AttentionParams& params, bool has_docs)
    : causal_(params.causal),
      window_left_(params.window_left),
      window_right_(params.window_right),
      has_docs_(has_docs) {
  slices_.reserve(params.slices.size());
  for (const MaskSlice& s : params.slices) slices_.push_back(SliceRegion::of(s));
}

KeyBounds MaskRule::bounds(int64_t q_pos) const {
  KeyBounds b{kMin, kMax};
  // Positions and windows are >= 0, so q_pos - left cannot overflow; q_pos + right saturates.
  if (window_left_ >= 0) b.lo = q_pos - window_left_;
  if (window_right_ >= 0) b.hi = add_saturated(q_pos, window_right_);
  if (causal_) b.hi = std::min(b.hi, q_pos);
  return b;
}

bool MaskRule::visible(int64_t q_pos, int64_t k_pos, int64_t q_doc, int64_t k_doc) const {
  const KeyBounds b = bounds(q_pos);
  if (k_pos < b.lo || k_pos > b.hi || (has_docs_ && q_doc != k_doc)) return false;
  if (slices_.empty()) return true;
  return std::any_of(slices_.begin(), slices_.end(),
                     [&](const SliceRegion& r) { return r.contains(q_pos, k_pos); });
}

BlockVisibility MaskRule::classify_without_slices(const BlockRange& q, const BlockRange& k) const {
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

BlockVisibility MaskRule::classify(const BlockRange& q, const BlockRange& k,
                                   std::span<const uint32_t> slices) const {
  const BlockVisibility base = classify_without_slices(q, k);
  if (base == BlockVisibility::kHidden || slices_.empty()) return base;
  // The box of the two blocks as a region: every pair of their position ranges.
  const SliceRegion box{q.pos_min, q.pos_max, k.pos_min, k.pos_max, kMin, kMax};
  bool met = false;
  for (const uint32_t i : slices) {
    const SliceRegion& r = slices_[i];
    if (r.intersect(box).empty()) continue;
    met = true;
    // The slice holds the whole box: the box inside its rectangle, the box's diagonals
    // [k.pos_min - q.pos_max, k.pos_max - q.pos_min] inside its band.
    const bool holds = q.pos_min >= r.q_lo && q.pos_max <= r.q_hi && k.pos_min >= r.k_lo &&
                       k.pos_max <= r.k_hi && k.pos_min - q.pos_max >= r.d_lo &&
                       k.pos_max - q.pos_min <= r.d_hi;
    if (holds) return base;
  }
  return met ? BlockVisibility::kPartial : BlockVisibility::kHidden;
}

BlockVisibility MaskRule::classify(const BlockRange& q, const BlockRange& k) const {
  if (slices_.empty()) return classify_without_slices(q, k);
  return classify(q, k, slices_meeting(q));
}

std::vector<uint32_t> MaskRule::slices_meeting(const BlockRange& q) const {
  std::vector<uint32_t> met;
  if (q.empty) return met;
  for (size_t i = 0; i < slices_.size(); ++i) {
    const SliceRegion& r = slices_[i];
    if (!r.empty() && r.q_hi >= q.pos_min && r.q_lo <= q.pos_max) {
      met.push_back(static_cast<uint32_t>(i));
    }
  }
  return met;
}

void check_slices_disjoint(std::span<const MaskSlice> slices) {
  std::vector<size_t> order(slices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return slices[a].q_begin < slices[b].q_begin; });
  for (size_t a = 0; a < order.size(); ++a) {
    const MaskSlice& s = slices[order[a]];
    const SliceRegion ra = SliceRegion::of(s);
    if (ra.empty()) continue;
    for (size_t b = a + 1; b < order.size() && slices[order[b]].q_begin < s.q_end; ++b) {
      const MaskSlice& t = slices[order[b]];
      const SliceRegion both = ra.intersect(SliceRegion::of(t));
      if (both.empty()) continue;
      // A witness: the smallest diagonal both hold, and its first query.
      const int64_t d = std::max(both.d_lo, both.k_lo - both.q_hi);
      const int64_t qp = std::max(both.q_lo, both.k_lo - d);
      const size_t i = std::min(order[a], order[b]), j = std::max(order[a], order[b]);
      const auto text = [&](size_t n) {
        const MaskSlice& x = slices[n];
        return detail::str_cat("slice ", n, " (q [", x.q_begin, ", ", x.q_end, "), k [", x.k_begin,
                               ", ", x.k_end, "), ", slice_type_name(x.type), ")");
      };
      throw Error(
          ErrorCode::kInvalidArgument,
          detail::str_cat("mask slices must not overlap: ", text(i), " and ", text(j),
                          " both make key position ", qp + d, " visible to query position ", qp));
    }
  }
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

std::vector<TileSpan> tile_spans(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                 int64_t tile) {
  const int64_t n = static_cast<int64_t>(pos.size());
  const int64_t min_rows = std::max<int64_t>(1, tile / 4);
  // Token i starts a new run: another document, or a jump in positions.
  const auto run_starts = [&](int64_t i) {
    const size_t at = static_cast<size_t>(i);
    if (!doc.empty() && doc[at] != doc[at - 1]) return true;
    const int64_t step = pos[at] - pos[at - 1];  // positions are >= 0: no overflow
    return step < 0 || step > tile;
  };
  std::vector<TileSpan> spans;
  spans.reserve(static_cast<size_t>((n + tile - 1) / tile));
  for (int64_t begin = 0; begin < n;) {
    int64_t end = std::min(begin + tile, n);
    // A tile that starts a run ends at a boundary once it holds min_rows rows (shorter runs, tiny
    // documents, join it); one that continues a run cut by the size ends at its run's end.
    const bool continues_run = begin > 0 && !run_starts(begin);
    for (int64_t i = begin + (continues_run ? 1 : min_rows); i < end; ++i) {
      if (run_starts(i)) {
        end = i;
        break;
      }
    }
    spans.push_back({begin, end - begin});
    begin = end;
  }
  return spans;
}

int64_t count_computed_pairs(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                             std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                             const AttentionParams& params, int64_t q_tile, int64_t k_tile) {
  const bool docs = !q_doc.empty() && !k_doc.empty();
  const MaskRule rule(params, docs);
  const auto ranges = [&](std::span<const int64_t> pos, std::span<const int64_t> doc,
                          int64_t tile) {
    std::vector<std::pair<BlockRange, int64_t>> r;
    for (const TileSpan& t : tile_spans(pos, docs ? doc : std::span<const int64_t>{}, tile)) {
      const auto rows = [&](std::span<const int64_t> x) {
        return x.empty() ? x : x.subspan(static_cast<size_t>(t.begin), static_cast<size_t>(t.size));
      };
      r.emplace_back(block_range(rows(pos), docs ? rows(doc) : std::span<const int64_t>{}), t.size);
    }
    return r;
  };
  const auto q = ranges(q_pos, q_doc, q_tile), k = ranges(k_pos, k_doc, k_tile);
  int64_t n = 0;
  for (const auto& [qr, qn] : q) {
    const std::vector<uint32_t> slices = rule.slices_meeting(qr);
    for (const auto& [kr, kn] : k) {
      if (rule.classify(qr, kr, slices) != BlockVisibility::kHidden) n += qn * kn;
    }
  }
  return n;
}

}  // namespace cpattn
