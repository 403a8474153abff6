// Sequence layouts: token assignment tables, coverage for any (S, P), shard/unshard round trips.
#include "cpattn/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <vector>

#include "cpattn/error.h"

namespace cpattn {
namespace {

using Indices = std::vector<int64_t>;

TEST(ChunkRange, SizesDifferByAtMostOneAndTile) {
  for (int64_t len : {0, 1, 5, 97, 1025}) {
    for (int64_t n : {1, 2, 3, 16}) {
      int64_t next = 0, lo = len, hi = 0;
      for (int64_t c = 0; c < n; ++c) {
        const TokenRange r = chunk_range(len, n, c);
        EXPECT_EQ(r.begin, next) << "len " << len << " chunks " << n << " chunk " << c;
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      EXPECT_EQ(next, len);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

struct TableRow {
  Layout layout;
  int64_t seq_len;
  int cp_size;
  std::vector<Indices> ranks;  // expected token indices per rank
};

TEST(ShardTokenIndices, MatchesHandWrittenTable) {
  const std::vector<TableRow> table = {
      {Layout::kContiguous, 10, 2, {{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}},
      {Layout::kZigzag, 10, 2, {{0, 1, 2, 8, 9}, {3, 4, 5, 6, 7}}},
      {Layout::kStriped, 10, 2, {{0, 2, 4, 6, 8}, {1, 3, 5, 7, 9}}},
      // 2P = 6 chunks of 8 tokens: sizes 2,2,1,1,1,1.
      {Layout::kZigzag, 8, 3, {{0, 1, 7}, {2, 3, 6}, {4, 5}}},
      {Layout::kContiguous, 3, 4, {{0}, {1}, {2}, {}}},
      {Layout::kZigzag, 3, 4, {{0}, {1}, {2}, {}}},
      {Layout::kStriped, 3, 4, {{0}, {1}, {2}, {}}},
      {Layout::kZigzag, 1, 2, {{0}, {}}},
      {Layout::kStriped, 0, 3, {{}, {}, {}}},
      {Layout::kZigzag, 16, 4, {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}}},
  };
  for (const TableRow& row : table) {
    for (int r = 0; r < row.cp_size; ++r) {
      const SequenceSharding seq = SequenceSharding::of(row.layout, row.seq_len, row.cp_size, r);
      EXPECT_EQ(shard_token_indices(seq, r), row.ranks[r])
          << layout_name(row.layout) << " S " << row.seq_len << " P " << row.cp_size << " rank "
          << r;
      EXPECT_EQ(shard_length(seq, r), static_cast<int64_t>(row.ranks[r].size()));
    }
  }
}

class LayoutCoverage : public ::testing::TestWithParam<std::tuple<Layout, int64_t, int>> {};

// Every token is held by exactly one rank, for any S and P (no padding, no error); doc_zigzag
// without documents is one document.
TEST_P(LayoutCoverage, EveryTokenExactlyOnce) {
  const auto [layout, seq_len, cp_size] = GetParam();
  std::vector<int> owner(static_cast<size_t>(seq_len), -1);
  int64_t lo = seq_len, hi = 0;
  const SequenceSharding seq = SequenceSharding::of(layout, seq_len, cp_size, 0);
  for (int r = 0; r < cp_size; ++r) {
    const Indices idx = shard_token_indices(seq, r);
    ASSERT_EQ(static_cast<int64_t>(idx.size()), shard_length(seq, r));
    for (int64_t t : idx) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, seq_len);
      EXPECT_EQ(owner[static_cast<size_t>(t)], -1) << "token " << t << " held twice";
      owner[static_cast<size_t>(t)] = r;
    }
    lo = std::min<int64_t>(lo, static_cast<int64_t>(idx.size()));
    hi = std::max<int64_t>(hi, static_cast<int64_t>(idx.size()));
  }
  EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
  // Zigzag ranks hold two chunks, each of which may carry one extra token.
  EXPECT_LE(hi - lo, layout == Layout::kZigzag || layout == Layout::kDocZigzag ? 2 : 1);
}

INSTANTIATE_TEST_SUITE_P(AllSizes, LayoutCoverage,
                         ::testing::Combine(::testing::Values(Layout::kContiguous, Layout::kZigzag,
                                                              Layout::kStriped, Layout::kDocZigzag),
                                            ::testing::Values(0, 1, 3, 7, 16, 97, 1025),
                                            ::testing::Values(1, 2, 3, 4, 8)),
                         [](const auto& tp) {
                           return std::string(layout_name(std::get<0>(tp.param))) + "_S" +
                                  std::to_string(std::get<1>(tp.param)) + "_cp" +
                                  std::to_string(std::get<2>(tp.param));
                         });

TEST(LayoutName, RoundTripsAndRejectsUnknown) {
  for (Layout l : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped, Layout::kDocZigzag}) {
    EXPECT_EQ(parse_layout(layout_name(l)), l);
  }
  try {
    parse_layout("ring");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'ring'"), std::string::npos) << e.what();
  }
}

TEST(ShardLength, RejectsBadArguments) {
  EXPECT_THROW(shard_length(SequenceSharding::of(Layout::kZigzag, -1, 2, 0), 0), Error);
  EXPECT_THROW(shard_length(SequenceSharding::of(Layout::kZigzag, 4, 0, 0), 0), Error);
  EXPECT_THROW(shard_length(SequenceSharding::of(Layout::kZigzag, 4, 2, 0), 2), Error);
  EXPECT_THROW(shard_length(SequenceSharding::of(Layout::kStriped, 4, 2, 0), -1), Error);
}

// A [B, S, H, D] tensor whose element value encodes its indices.
Tensor iota_tensor(int64_t B, int64_t S, int64_t H, int64_t D) {
  Tensor t({B, S, H, D});
  std::iota(t.span().begin(), t.span().end(), 0.0f);
  return t;
}

TEST(ShardTensor, RoundTripsEveryLayoutIncludingEmptyRanks) {
  const int64_t B = 2, S = 11, H = 3, D = 5;
  const Tensor whole = iota_tensor(B, S, H, D);
  for (Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
    for (int P : {1, 3, 8}) {
      const SequenceSharding seq = SequenceSharding::of(layout, S, P, 0);
      std::vector<Tensor> pieces;
      std::vector<ConstView> views;
      for (int r = 0; r < P; ++r) {
        pieces.push_back(shard_tensor(whole.view(), seq, r));
        const Indices idx = shard_token_indices(seq, r);
        ASSERT_EQ(pieces.back().shape(),
                  (std::vector<int64_t>{B, static_cast<int64_t>(idx.size()), H, D}));
        // Local token i is global token idx[i].
        const ConstView g = whole.view(), p = pieces.back().view();
        for (int64_t b = 0; b < B; ++b)
          for (size_t i = 0; i < idx.size(); ++i)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d)
                ASSERT_EQ(p(b, static_cast<int64_t>(i), h, d), g(b, idx[i], h, d));
      }
      for (const Tensor& t : pieces) views.push_back(t.view());
      const Tensor back = unshard_tensor(views, seq);
      EXPECT_TRUE(std::equal(back.span().begin(), back.span().end(), whole.span().begin()))
          << layout_name(layout) << " P " << P;
    }
  }
}

TEST(ShardTensor, ReadsStridedInput) {
  // The same logical tensor stored BHSD: sharding must follow logical [B, S, H, D] indices.
  const int64_t B = 2, S = 9, H = 2, D = 3;
  const Tensor bshd = iota_tensor(B, S, H, D);
  Tensor bhsd({B, H, S, D});
  const View dst = bhsd.view(MemoryLayout::kBHSD);
  const ConstView src = bshd.view();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) dst(b, s, h, d) = src(b, s, h, d);
  const SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, S, 2, 1);
  const Tensor a = shard_tensor(bshd.view(), seq, 1);
  const Tensor c = shard_tensor(std::as_const(bhsd).view(MemoryLayout::kBHSD), seq, 1);
  EXPECT_TRUE(std::equal(a.span().begin(), a.span().end(), c.span().begin()));
}

TEST(ShardTensor, UnshardRejectsWrongPieceShape) {
  const Tensor whole = iota_tensor(1, 6, 1, 2);
  const SequenceSharding seq = SequenceSharding::of(Layout::kStriped, 6, 2, 0);
  const Tensor p0 = shard_tensor(whole.view(), seq, 0);
  const Tensor wrong({1, 2, 1, 2});
  const std::vector<ConstView> views = {p0.view(), wrong.view()};
  try {
    unshard_tensor(views, seq);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
    EXPECT_NE(std::string(e.what()).find("piece 1 expected shape [1, 3, 1, 2]"), std::string::npos)
        << e.what();
  }
}

TEST(ShardLse, RoundTripsTokenDimensionLast) {
  const int64_t B = 2, H = 3, S = 7;
  Tensor lse({B, H, S});
  std::iota(lse.span().begin(), lse.span().end(), 0.0f);
  const SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, S, 3, 0);
  std::vector<Tensor> pieces;
  for (int r = 0; r < 3; ++r) {
    pieces.push_back(shard_lse(lse, seq, r));
    const Indices idx = shard_token_indices(seq, r);
    const Tensor& p = pieces.back();
    ASSERT_EQ(p.shape(), (std::vector<int64_t>{B, H, static_cast<int64_t>(idx.size())}));
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (size_t i = 0; i < idx.size(); ++i)
        EXPECT_EQ(p.data()[bh * static_cast<int64_t>(idx.size()) + static_cast<int64_t>(i)],
                  lse.data()[bh * S + idx[i]]);
  }
  const Tensor back = unshard_lse(pieces, seq);
  EXPECT_TRUE(std::equal(back.span().begin(), back.span().end(), lse.span().begin()));
}

TEST(SequenceSharding, DocumentsAndPositionsKeepTheirValues) {
  // Packed documents: ids stay attached to their tokens whatever rank they land on, including a
  // length-1 document (id 1) and a document split across ranks (id 2).
  SequenceSharding s;
  s.layout = Layout::kZigzag;
  s.seq_len = 8;
  s.cp_size = 2;
  s.docs = {0, 1, 2, 2, 2, 2, 2, 3};
  s.positions = {100, 101, 102, 103, 104, 105, 106, 107};
  s.validate();
  EXPECT_EQ(s.local_docs(0), (Indices{0, 1, 2, 3}));
  EXPECT_EQ(s.local_docs(1), (Indices{2, 2, 2, 2}));
  EXPECT_EQ(s.local_positions(0), (Indices{100, 101, 106, 107}));
  s.positions.clear();
  EXPECT_EQ(s.local_positions(1), (Indices{2, 3, 4, 5}));
  s.docs.clear();
  EXPECT_TRUE(s.local_docs(1).empty());
}

TEST(SequenceSharding, ValidateNamesTheBadField) {
  SequenceSharding s;
  s.seq_len = 4;
  s.cp_size = 2;
  s.docs = {0, 0, 1};
  try {
    s.validate();
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
    EXPECT_NE(std::string(e.what()).find("docs: expected 4 entries"), std::string::npos)
        << e.what();
  }
  s.docs.clear();
  s.positions = {0, 1, -2, 3};
  EXPECT_THROW(s.validate(), Error);
  s.positions.clear();
  s.cp_rank = 2;
  EXPECT_THROW(s.validate(), Error);
}

}  // namespace
}  // namespace cpattn
