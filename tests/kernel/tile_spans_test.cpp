// The kernel's tiling rule (tile_spans, cpattn/mask.h): full tiles over one run of consecutive
// positions in one document, an early end at a document boundary or a position jump once a
// quarter tile is filled, no tiny tiles from tiny documents; and count_computed_pairs, the work
// behind the visible pairs.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "cpattn/mask.h"

namespace cpattn {
namespace {

std::vector<int64_t> iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<int64_t> sizes(const std::vector<TileSpan>& spans) {
  std::vector<int64_t> s;
  int64_t at = 0;
  for (const TileSpan& t : spans) {
    EXPECT_EQ(t.begin, at);  // consecutive, covering every token once
    at += t.size;
    s.push_back(t.size);
  }
  return s;
}

TEST(TileSpans, OneRunGivesFullTilesTheLastShorter) {
  EXPECT_EQ(sizes(tile_spans(iota(300), {}, 128)), (std::vector<int64_t>{128, 128, 44}));
  EXPECT_EQ(sizes(tile_spans(iota(256), std::vector<int64_t>(256, 7), 128)),
            (std::vector<int64_t>{128, 128}));
  EXPECT_TRUE(tile_spans({}, {}, 128).empty());
  EXPECT_EQ(sizes(tile_spans(iota(1), {}, 128)), (std::vector<int64_t>{1}));
}

TEST(TileSpans, ATileEndsAtADocumentBoundaryOnceAQuarterIsFilled) {
  // Documents of 100, 20, 10 and 170 tokens, tiles of 128 (a quarter: 32).
  std::vector<int64_t> doc;
  for (auto [id, n] : {std::pair{0, 100}, {1, 20}, {2, 10}, {3, 170}}) doc.insert(doc.end(), n, id);
  // 100 (ends at doc 1); 20 + 10 + 98 (docs 1 and 2 are too short to end a tile alone, and
  // doc 3's start comes after 30 < 32 rows); 72.
  EXPECT_EQ(sizes(tile_spans(iota(300), doc, 128)), (std::vector<int64_t>{100, 128, 72}));
}

TEST(TileSpans, ATileEndsAtAPositionJumpButNotAtAStride) {
  // Two zigzag chunks of 150 tokens, far apart: the jump ends a tile.
  std::vector<int64_t> pos = iota(150);
  const std::vector<int64_t> late = iota(150, 10000);
  pos.insert(pos.end(), late.begin(), late.end());
  EXPECT_EQ(sizes(tile_spans(pos, {}, 128)), (std::vector<int64_t>{128, 22, 128, 22}));
  // Backwards is a jump too.
  std::vector<int64_t> back = iota(100, 500);
  const std::vector<int64_t> front = iota(100);
  back.insert(back.end(), front.begin(), front.end());
  EXPECT_EQ(sizes(tile_spans(back, {}, 128)), (std::vector<int64_t>{100, 100}));
  // The striped layout's stride (P <= the tile) is one run.
  std::vector<int64_t> striped;
  for (int64_t i = 0; i < 300; ++i) striped.push_back(3 + 8 * i);
  EXPECT_EQ(sizes(tile_spans(striped, {}, 128)), (std::vector<int64_t>{128, 128, 44}));
}

TEST(TileSpans, TinyDocumentsMakeNoTinyTiles) {
  std::vector<int64_t> doc;
  for (int64_t i = 0; i < 1000; ++i) doc.push_back(i / 3);  // documents of 3 tokens
  const std::vector<TileSpan> spans = tile_spans(iota(1000), doc, 128);
  for (size_t i = 0; i + 1 < spans.size(); ++i) {  // the last one holds what is left
    EXPECT_GE(spans[i].size, 32);
    EXPECT_LE(spans[i].size, 128);
  }
}

// Property: the computed pairs cover the visible ones, and a mask that hides nothing computes
// every pair; with run-aligned tiles, disjoint documents cost little more than their pairs.
TEST(CountComputedPairs, CoversTheVisiblePairs) {
  std::mt19937_64 gen(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> doc;
    const int64_t n = 200 + trial * 37;
    while (static_cast<int64_t>(doc.size()) < n) {
      const int64_t len = std::uniform_int_distribution<int64_t>(1, 150)(gen);
      doc.insert(doc.end(), static_cast<size_t>(len), static_cast<int64_t>(doc.size()));
    }
    doc.resize(static_cast<size_t>(n));
    const std::vector<int64_t> pos = iota(n);
    AttentionParams params;
    params.causal = trial % 2 == 0;
    const int64_t visible = count_visible_pairs(pos, pos, doc, doc, params);
    const int64_t computed = count_computed_pairs(pos, pos, doc, doc, params, 64, 64);
    EXPECT_GE(computed, visible);
    EXPECT_LE(computed, n * n);
    AttentionParams none;
    EXPECT_EQ(count_computed_pairs(pos, pos, {}, {}, none, 64, 32), n * n);
  }
  // Two documents of 512 tokens, bidirectional: tiles never straddle them, so every computed
  // pair is visible.
  std::vector<int64_t> doc(1024, 0);
  std::fill(doc.begin() + 512, doc.end(), 1);
  const std::vector<int64_t> pos = iota(1024);
  EXPECT_EQ(count_computed_pairs(pos, pos, doc, doc, {}, 192, 128),
            count_visible_pairs(pos, pos, doc, doc, {}));
}

}  // namespace
}  // namespace cpattn
