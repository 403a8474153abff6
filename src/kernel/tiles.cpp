// Tile ranges and the per-element mask of partially visible tiles (tiles.h).
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
    const auto rows = [&](std::span<const int64_t> x) {
      return x.empty() ? x : x.subspan(static_cast<size_t>(begin), static_cast<size_t>(t.size));
    };
    t.range = block_range(rows(pos), rows(doc));
    tiles.push_back(t);
  }
  return tiles;
}

TileMask::TileMask(const Problem& p)
    : rule_(AttentionParams{p.scale, p.causal, p.window_left, p.window_right, p.dropout_p},
            p.has_docs),
      q_pos_(p.q_pos),
      k_pos_(p.k_pos),
      q_doc_(p.q_doc),
      k_doc_(p.k_doc) {}

void TileMask::mask_keys(int64_t q_index, const TileRange& k, float* x, int64_t stride) const {
  const KeyBounds b = rule_.bounds(q_pos_[static_cast<size_t>(q_index)]);
  const int64_t* kp = k_pos_.data() + k.begin;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (rule_.has_docs()) {
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
