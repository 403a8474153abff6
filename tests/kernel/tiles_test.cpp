// TileMask::visible_box (kernel/tiles.h), the rows of a tile pair the forward's products run on
// for a partially visible tile: it holds every visible pair, for any positions, documents,
// windows and slices, and on a causal diagonal of consecutive positions it is the tight box.
#include "kernel/tiles.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "verify/reference_case.h"

namespace cpattn {
namespace {

using detail::TileBox;
using detail::TileMask;
using detail::TileRange;

// The kernel's view of a mask: only what TileMask reads.
struct MaskCall {
  std::vector<int64_t> q_pos, k_pos, q_doc, k_doc;
  AttentionParams params;

  detail::Problem problem() const {
    detail::Problem p;
    p.q_pos = q_pos;
    p.k_pos = k_pos;
    p.q_doc = q_doc;
    p.k_doc = k_doc;
    p.has_docs = !q_doc.empty();
    p.params = &params;
    return p;
  }
};

std::vector<int64_t> iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(VisibleBox, OnACausalDiagonalLeavesOutTheKeysAfterAndTheQueriesBefore) {
  MaskCall call{iota(512), iota(512), {}, {}, {}};
  call.params.causal = true;
  const detail::Problem p = call.problem();
  const std::vector<TileRange> q_tiles = detail::make_tiles(call.q_pos, {}, 192);
  const std::vector<TileRange> k_tiles = detail::make_tiles(call.k_pos, {}, 128);
  const TileMask mask(p, q_tiles);
  const auto box = [&](int qi, int ki) {
    const TileBox b = mask.visible_box(q_tiles[size_t(qi)], k_tiles[size_t(ki)]);
    return std::vector<int64_t>{b.q_begin, b.q_end, b.k_begin, b.k_end};
  };
  // q [0, 192) x k [0, 128): query i sees keys 0..i, every key is seen by some query.
  EXPECT_EQ(box(0, 0), (std::vector<int64_t>{0, 192, 0, 128}));
  // q [0, 192) x k [128, 256): queries 128.. see keys 128..191 (rows 0..63).
  EXPECT_EQ(box(0, 1), (std::vector<int64_t>{128, 192, 0, 64}));
  // q [192, 384) x k [256, 384): queries from 256 (row 64) on, every key.
  EXPECT_EQ(box(1, 2), (std::vector<int64_t>{64, 192, 0, 128}));
  // A tile no query of which reaches: q [0, 192) x k [256, 384).
  EXPECT_TRUE(mask.visible_box(q_tiles[0], k_tiles[2]).empty());
}

TEST(VisibleBox, ASlidingWindowLeavesOutTheKeysBeforeAndTheQueriesAfter) {
  MaskCall call{iota(64, 100), iota(64, 100), {}, {}, {}};
  call.params.causal = true;
  call.params.window_left = 10;
  const detail::Problem p = call.problem();
  const std::vector<TileRange> q_tiles = detail::make_tiles(call.q_pos, {}, 16);
  const std::vector<TileRange> k_tiles = detail::make_tiles(call.k_pos, {}, 16);
  const TileMask mask(p, q_tiles);
  // q positions [132, 148) x k positions [116, 132): query 132 + i sees keys 122 + i .. 132 + i,
  // so only rows i <= 9 reach this tile, and only its keys from 122 (row 6) on.
  const TileBox b = mask.visible_box(q_tiles[2], k_tiles[1]);
  EXPECT_EQ((std::vector<int64_t>{b.q_begin, b.q_end, b.k_begin, b.k_end}),
            (std::vector<int64_t>{0, 10, 6, 16}));
}

// Random positions (runs with jumps, so some tiles are not consecutive), documents, causal masks,
// windows and mask slices, odd tile sizes: every pair the double reference calls visible lies in
// the box of its tiles; without documents and slices and on consecutive positions, the box is
// the bounding box of the visible pairs.
RC_GTEST_PROP(VisibleBox, HoldsEveryVisiblePair, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 300);
  const auto positions = [&] {
    std::vector<int64_t> pos;
    const int runs = *rc::gen::inRange(1, 4);
    for (int r = 0; r < runs; ++r) {
      const int64_t begin = *rc::gen::inRange<int64_t>(0, n);
      const int64_t length = *rc::gen::inRange<int64_t>(1, 120);
      for (int64_t x = begin; x < std::min(n, begin + length); ++x) pos.push_back(x);
    }
    return pos;
  };
  MaskCall call{positions(), positions(), {}, {}, {}};
  const int64_t doc_length = *rc::gen::element<int64_t>(0, 0, 5, 37);  // 0: no documents
  if (doc_length > 0) {
    for (const int64_t x : call.q_pos) call.q_doc.push_back(x / doc_length);
    for (const int64_t x : call.k_pos) call.k_doc.push_back(x / doc_length);
  }
  call.params.causal = *rc::gen::arbitrary<bool>();
  call.params.window_left = *rc::gen::element<int64_t>(-1, -1, 0, 6, 50);
  call.params.window_right = *rc::gen::element<int64_t>(-1, -1, 0, 9);
  const reference::MaskKind slices =
      *rc::gen::element(reference::MaskKind::kNone, reference::MaskKind::kNone,
                        reference::MaskKind::kPrefixLmSlices, reference::MaskKind::kRandomSlices);
  call.params.slices = reference::make_slices(slices, n, *rc::gen::inRange<uint64_t>(1, 1000));
  const detail::Problem p = call.problem();
  const int64_t q_tile = *rc::gen::element<int64_t>(1, 7, 16, 192);
  const int64_t k_tile = *rc::gen::element<int64_t>(1, 5, 16, 128);
  const std::vector<TileRange> q_tiles = detail::make_tiles(call.q_pos, call.q_doc, q_tile);
  const std::vector<TileRange> k_tiles = detail::make_tiles(call.k_pos, call.k_doc, k_tile);
  const TileMask mask(p, q_tiles);
  const auto doc = [](const std::vector<int64_t>& d, int64_t i) {
    return d.empty() ? 0 : d[static_cast<size_t>(i)];
  };
  bool tight_checked = false;
  for (const TileRange& qt : q_tiles) {
    for (const TileRange& kt : k_tiles) {
      const TileBox box = mask.visible_box(qt, kt);
      TileBox tight{qt.size, 0, kt.size, 0};
      for (int64_t i = 0; i < qt.size; ++i) {
        for (int64_t j = 0; j < kt.size; ++j) {
          const int64_t qi = qt.begin + i, kj = kt.begin + j;
          if (!reference::visible(call.params, call.q_pos[size_t(qi)], call.k_pos[size_t(kj)],
                                  doc(call.q_doc, qi), doc(call.k_doc, kj))) {
            continue;
          }
          RC_ASSERT(box.q_begin <= i && i < box.q_end && box.k_begin <= j && j < box.k_end);
          tight = {std::min(tight.q_begin, i), i + 1, std::min(tight.k_begin, j),
                   std::max(tight.k_end, j + 1)};
        }
      }
      if (doc_length == 0 && call.params.slices.empty() && qt.consecutive && kt.consecutive) {
        tight_checked = true;
        if (tight.empty()) {
          RC_ASSERT(box.empty());
        } else {
          RC_ASSERT(box.q_begin == tight.q_begin && box.q_end == tight.q_end &&
                    box.k_begin == tight.k_begin && box.k_end == tight.k_end);
        }
      }
    }
  }
  RC_TAG(tight_checked ? "tight boxes checked" : "superset only");
}

}  // namespace
}  // namespace cpattn
