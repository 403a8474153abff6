// Tile ranges and the per-element mask of partially visible tiles (tiles.h).
#include "kernel/tiles.h"

#include <algorithm>
#include <array>
#include <limits>
#include <tuple>
#include <utility>

namespace cpattn::detail {

std::vector<TileRange> make_tiles(std::span<const int64_t> pos, std::span<const int64_t> doc,
                                  int64_t tile) {
  std::vector<TileRange> tiles;
  for (const TileSpan& span : tile_spans(pos, doc, tile)) {
    TileRange t;
    t.begin = span.begin;
    t.size = span.size;
    t.index = static_cast<int64_t>(tiles.size());
    const auto rows = [&](std::span<const int64_t> x) {
      return x.empty() ? x : x.subspan(static_cast<size_t>(t.begin), static_cast<size_t>(t.size));
    };
    t.range = block_range(rows(pos), rows(doc));
    const std::span<const int64_t> tile_pos = rows(pos);
    t.consecutive = std::adjacent_find(tile_pos.begin(), tile_pos.end(), [](int64_t a, int64_t b) {
                      return b - a != 1;  // positions are >= 0: no overflow
                    }) == tile_pos.end();
    tiles.push_back(t);
  }
  return tiles;
}

TileMask::TileMask(const Problem& p, std::span<const TileRange> q_tiles)
    : rule_(*p.params, p.has_docs),
      q_pos_(p.q_pos),
      k_pos_(p.k_pos),
      q_doc_(p.q_doc),
      k_doc_(p.k_doc) {
  if (!rule_.has_slices()) return;
  q_tile_slices_.reserve(q_tiles.size());
  for (const TileRange& t : q_tiles) q_tile_slices_.push_back(rule_.slices_meeting(t.range));
}

namespace {

// The key rows [first, end) of a tile of consecutive positions (key j at position kp0 + j) that
// lie within bounds b; first >= end when none do. Positions are >= 0, so neither difference
// overflows (b.lo may be INT64_MIN, b.hi INT64_MAX).
std::pair<int64_t, int64_t> rows_within(const KeyBounds& b, int64_t kp0, int64_t size) {
  const int64_t first = b.lo <= kp0 ? 0 : std::min(b.lo - kp0, size);
  const int64_t end = b.hi < kp0 ? 0 : std::min(b.hi - kp0, size - 1) + 1;
  return {first, end};
}

}  // namespace

TileBox TileMask::visible_box(const TileRange& q, const TileRange& k) const {
  TileBox box{q.size, 0, k.size, 0};
  for (int64_t i = 0; i < q.size; ++i) {
    const KeyBounds b = rule_.bounds(q_pos_[static_cast<size_t>(q.begin + i)]);
    int64_t first = 0, end = k.size;
    if (k.consecutive) {
      std::tie(first, end) = rows_within(b, k_pos_[static_cast<size_t>(k.begin)], k.size);
    } else if (b.hi < k.range.pos_min || b.lo > k.range.pos_max) {
      end = 0;
    }
    if (first >= end) continue;
    box.q_begin = std::min(box.q_begin, i);
    box.q_end = i + 1;
    box.k_begin = std::min(box.k_begin, first);
    box.k_end = std::max(box.k_end, end);
  }
  return box;
}

void TileMask::mask_keys(const TileRange& q, int64_t q_index, const TileRange& k, float* x,
                         int64_t stride) const {
  const int64_t qp = q_pos_[static_cast<size_t>(q_index)];
  const KeyBounds b = rule_.bounds(qp);
  const int64_t* kp = k_pos_.data() + k.begin;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (k.consecutive && !rule_.has_docs() && !rule_.has_slices()) {
    // Key j has position kp[0] + j: the visible keys are one interval [first, end) of j.
    const auto [first, end] = rows_within(b, kp[0], k.size);
    for (int64_t j = 0; j < std::min(first, k.size); ++j) x[j * stride] = kNegInf;
    for (int64_t j = std::max(end, first); j < k.size; ++j) x[j * stride] = kNegInf;
    return;
  }
  const int64_t* kd = rule_.has_docs() ? k_doc_.data() + k.begin : nullptr;
  const int64_t qd = rule_.has_docs() ? q_doc_[static_cast<size_t>(q_index)] : 0;
  // The slices' part: the key intervals of this query's slices (at most one slice holds any
  // pair, but several may hold keys of one query).
  constexpr size_t kMaxIntervals = 16;
  std::array<KeyBounds, kMaxIntervals> intervals;
  size_t n_intervals = 0;
  bool many = false;
  if (rule_.has_slices()) {
    for (const uint32_t s : slices_of_(q)) {
      const KeyBounds kb = rule_.slice_regions()[s].keys_of(qp);
      if (kb.lo > kb.hi) continue;
      if (n_intervals == kMaxIntervals) {
        many = true;
        break;
      }
      intervals[n_intervals++] = kb;
    }
  }
  const auto through_slices = [&](int64_t key) {
    if (many) {
      for (const uint32_t s : slices_of_(q)) {
        if (rule_.slice_regions()[s].contains(qp, key)) return true;
      }
      return false;
    }
    for (size_t i = 0; i < n_intervals; ++i) {
      if (key >= intervals[i].lo && key <= intervals[i].hi) return true;
    }
    return false;
  };
  for (int64_t j = 0; j < k.size; ++j) {
    const bool hidden = kp[j] < b.lo || kp[j] > b.hi || (kd != nullptr && kd[j] != qd) ||
                        (rule_.has_slices() && !through_slices(kp[j]));
    if (hidden) x[j * stride] = kNegInf;
  }
}

}  // namespace cpattn::detail
