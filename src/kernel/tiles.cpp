// Tile ranges and mask classification (tiles.h).
#include "kernel/tiles.h"

#include <algorithm>
#include <limits>

namespace cpattn::detail {

std::vector<TileRange> make_tiles(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                  int64_t tile) {
  const int64_t n = static_cast<int64_t>(pos.size());
  std::vector<TileRange> tiles;
  tiles.reserve(static_cast<size_t>((n + tile - 1) / tile));
  for (int64_t begin = 0; begin < n; begin += tile) {
    TileRange t;
    t.begin = begin;
    t.size = std::min(tile, n - begin);
    const auto p = pos.subspan(static_cast<size_t>(begin), static_cast<size_t>(t.size));
    const auto [pmin, pmax] = std::minmax_element(p.begin(), p.end());
    t.pos_min = *pmin;
    t.pos_max = *pmax;
    if (!doc.empty()) {
      const auto d = doc.subspan(static_cast<size_t>(begin), static_cast<size_t>(t.size));
      const auto [dmin, dmax] = std::minmax_element(d.begin(), d.end());
      t.doc_min = *dmin;
      t.doc_max = *dmax;
    }
    tiles.push_back(t);
  }
  return tiles;
}

MaskRule::MaskRule(const Problem& p)
    : causal_(p.causal),
      window_left_(p.window_left),
      window_right_(p.window_right),
      q_pos_(p.q_pos),
      k_pos_(p.k_pos),
      q_doc_(p.q_doc),
      k_doc_(p.k_doc),
      has_docs_(p.has_docs) {}

KeyBounds MaskRule::bounds(int64_t q_pos) const {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  KeyBounds b{std::numeric_limits<int64_t>::min(), kMax};
  // Positions and windows are >= 0, so q_pos - left cannot overflow; q_pos + right saturates.
  if (window_left_ >= 0) b.lo = q_pos - window_left_;
  if (window_right_ >= 0) b.hi = window_right_ > kMax - q_pos ? kMax : q_pos + window_right_;
  if (causal_) b.hi = std::min(b.hi, q_pos);
  return b;
}

TileKind MaskRule::classify(const TileRange& q, const TileRange& k) const {
  if (has_docs_ && (q.doc_max < k.doc_min || k.doc_max < q.doc_min)) return TileKind::kSkip;
  const KeyBounds first = bounds(q.pos_min), last = bounds(q.pos_max);
  if (last.hi < k.pos_min || first.lo > k.pos_max) return TileKind::kSkip;
  const bool one_doc =
      !has_docs_ || (q.doc_min == q.doc_max && k.doc_min == k.doc_max && q.doc_min == k.doc_min);
  if (one_doc && first.hi >= k.pos_max && last.lo <= k.pos_min) return TileKind::kFull;
  return TileKind::kPartial;
}

void MaskRule::mask_keys(int64_t q_index, const TileRange& k, float* x, int64_t stride) const {
  const KeyBounds b = bounds(q_pos_[static_cast<size_t>(q_index)]);
  const int64_t* kp = k_pos_.data() + k.begin;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (has_docs_) {
    const int64_t qd = q_doc_[static_cast<size_t>(q_index)];
    const int64_t* kd = k_doc_.data() + k.begin;
    for (int64_t j = 0; j < k.size; ++j) {
      if (kp[j] < b.lo || kp[j] > b.hi || kd[j] != qd) x[j * stride] = kNegInf;
    }
  } else {
    for (int64_t j = 0; j < k.size; ++j) {
      if (kp[j] < b.lo || kp[j] > b.hi) x[j * stride] = kNegInf;
    }
  }
}

}  // namespace cpattn::detail
