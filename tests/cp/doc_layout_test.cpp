// The document-balanced layout (Layout::kDocZigzag, docs/design.md section 5.1): every document
// zigzagged over the ranks with a greedy rotation. Hand tables, the reduction to kZigzag,
// coverage and round trips with short, empty and long documents, the pure-function property
// (every rank computes the same table), and the load-balance bound on visible pairs beside the
// plain zigzag's figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpattn/layout.h"
#include "cpattn/mask.h"
#include "cpattn/thread_communicator.h"

namespace cpattn {
namespace {

using Indices = std::vector<int64_t>;

// Document ids 0, 1, ... repeated by the lengths (a length-0 document holds no token).
Indices doc_ids(const std::vector<int64_t>& lengths) {
  Indices ids;
  for (size_t d = 0; d < lengths.size(); ++d) {
    ids.insert(ids.end(), static_cast<size_t>(lengths[d]), static_cast<int64_t>(d));
  }
  return ids;
}

SequenceSharding packed(Layout layout, const std::vector<int64_t>& lengths, int P, int rank = 0) {
  Indices ids = doc_ids(lengths);
  SequenceSharding s = SequenceSharding::of(layout, static_cast<int64_t>(ids.size()), P, rank);
  s.docs = std::move(ids);
  return s;
}

std::vector<Indices> table(const SequenceSharding& s) {
  std::vector<Indices> t;
  for (int r = 0; r < s.cp_size; ++r) t.push_back(shard_token_indices(s, r));
  return t;
}

// Document lengths summing to S: mostly 0..3 tokens (a length-0 document is an empty run), with a
// long one (up to `longest`) every few.
std::vector<int64_t> short_and_long(int64_t S, int64_t longest, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> lengths;
  for (int64_t at = 0; at < S;) {
    const bool long_one = gen() % 5 == 0;
    const int64_t want = long_one ? 1 + static_cast<int64_t>(gen() % static_cast<uint64_t>(longest))
                                  : static_cast<int64_t>(gen() % 4);
    lengths.push_back(std::min(want, S - at));
    at += lengths.back();
  }
  return lengths;
}

// Document lengths summing to S with mean about `mean` (exponentially distributed, >= 1).
std::vector<int64_t> exponential(int64_t S, double mean, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::exponential_distribution<double> length(1.0 / mean);
  std::vector<int64_t> lengths;
  for (int64_t at = 0; at < S;) {
    lengths.push_back(std::min(std::max<int64_t>(1, static_cast<int64_t>(length(gen))), S - at));
    at += lengths.back();
  }
  return lengths;
}

TEST(DocZigzag, MatchesHandWrittenTable) {
  struct Row {
    std::vector<int64_t> lengths;
    int P;
    std::vector<Indices> ranks;
  };
  const std::vector<Row> rows = {
      // One document: the zigzag (chunks 3,3,2,2).
      {{10}, 2, {{0, 1, 2, 8, 9}, {3, 4, 5, 6, 7}}},
      // Two documents of 3 (chunks 1,1,1,0): the first gives rank 1 two tokens, so the second is
      // rotated by 1 and its two-token slot goes to rank 0.
      {{3, 3}, 2, {{0, 4, 5}, {1, 2, 3}}},
      // Single tokens alternate ranks (each goes to the rank with fewer tokens).
      {{1, 1, 1, 1}, 2, {{0, 2}, {1, 3}}},
      // An empty document is no run at all: the same as {1, 1}.
      {{1, 0, 1}, 2, {{0}, {1}}},
      // A multiple of 2P takes rotation 0 whatever came before.
      {{1, 4}, 2, {{0, 1, 4}, {2, 3}}},
  };
  for (const Row& row : rows) {
    const SequenceSharding s = packed(Layout::kDocZigzag, row.lengths, row.P);
    EXPECT_EQ(table(s), row.ranks) << "lengths " << ::testing::PrintToString(row.lengths);
    for (int r = 0; r < row.P; ++r) {
      EXPECT_EQ(shard_length(s, r), static_cast<int64_t>(row.ranks[static_cast<size_t>(r)].size()));
    }
  }
}

TEST(DocZigzag, WithoutDocumentsOrWithOneItIsTheZigzag) {
  for (int64_t S : {0, 1, 7, 97, 1025}) {
    for (int P : {1, 2, 3, 8}) {
      const SequenceSharding zigzag = SequenceSharding::of(Layout::kZigzag, S, P, 0);
      SequenceSharding doc = SequenceSharding::of(Layout::kDocZigzag, S, P, 0);
      EXPECT_EQ(table(doc), table(zigzag)) << "no docs, S " << S << " P " << P;
      doc.docs.assign(static_cast<size_t>(S), 42);
      EXPECT_EQ(table(doc), table(zigzag)) << "one document, S " << S << " P " << P;
    }
  }
}

// Every token on exactly one rank, in ascending order; every rank holds 2 q, 2 q + 1 or 2 q + 2
// tokens of a document of 2 P q + e tokens (e < 2P); the ranks' totals differ by at most 2.
TEST(DocZigzag, EveryDocumentIsZigzaggedAndTokenCountsStayEven) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    for (int P : {1, 2, 3, 8}) {
      const std::vector<int64_t> lengths =
          seed % 2 ? short_and_long(1025, 300, seed) : exponential(2048, 64.0, seed);
      const SequenceSharding s = packed(Layout::kDocZigzag, lengths, P);
      SCOPED_TRACE("seed " + std::to_string(seed) + " P " + std::to_string(P));
      std::vector<int> owner(static_cast<size_t>(s.seq_len), -1);
      int64_t lo = s.seq_len, hi = 0;
      for (int r = 0; r < P; ++r) {
        const Indices idx = shard_token_indices(s, r);
        EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
        for (int64_t t : idx) {
          ASSERT_EQ(owner[static_cast<size_t>(t)], -1) << "token " << t << " held twice";
          owner[static_cast<size_t>(t)] = r;
        }
        lo = std::min<int64_t>(lo, static_cast<int64_t>(idx.size()));
        hi = std::max<int64_t>(hi, static_cast<int64_t>(idx.size()));
      }
      EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
      EXPECT_LE(hi - lo, 2);
      int64_t begin = 0;
      for (int64_t length : lengths) {
        std::vector<int64_t> per_rank(static_cast<size_t>(P), 0);
        for (int64_t t = begin; t < begin + length; ++t) ++per_rank[static_cast<size_t>(owner[t])];
        const int64_t q = length / (2 * P);
        for (int64_t n : per_rank) {
          EXPECT_GE(n, 2 * q);
          EXPECT_LE(n, 2 * q + 2);
        }
        begin += length;
      }
    }
  }
}

// A [B, S, H, D] tensor whose element value encodes its indices.
Tensor iota_tensor(int64_t B, int64_t S, int64_t H, int64_t D) {
  Tensor t({B, S, H, D});
  std::iota(t.span().begin(), t.span().end(), 0.0f);
  return t;
}

TEST(DocZigzag, ShardAndUnshardRoundTripWithShortAndEmptyDocuments) {
  for (int64_t S : {0, 1, 7, 97, 1025}) {
    for (int P : {1, 2, 3, 8}) {
      const SequenceSharding s =
          packed(Layout::kDocZigzag, short_and_long(S, 200, static_cast<uint64_t>(S + P)), P);
      ASSERT_EQ(s.seq_len, S);
      SCOPED_TRACE("S " + std::to_string(S) + " P " + std::to_string(P));
      const Tensor whole = iota_tensor(2, S, 2, 3);
      Tensor lse({2, 3, S});
      std::iota(lse.span().begin(), lse.span().end(), 0.0f);
      std::vector<Tensor> pieces, lse_pieces;
      std::vector<ConstView> views;
      for (int r = 0; r < P; ++r) {
        pieces.push_back(shard_tensor(whole.view(), s, r));
        lse_pieces.push_back(shard_lse(lse, s, r));
        const Indices idx = shard_token_indices(s, r);
        ASSERT_EQ(pieces.back().dim(1), static_cast<int64_t>(idx.size()));
        EXPECT_EQ(shard_values(s.docs, s, r), s.local_docs(r));
        EXPECT_EQ(s.local_positions(r), idx);
        for (size_t i = 0; i < idx.size(); ++i) {
          EXPECT_EQ(pieces.back().view()(1, static_cast<int64_t>(i), 1, 2),
                    whole.view()(1, idx[i], 1, 2));
        }
      }
      for (const Tensor& t : pieces) views.push_back(t.view());
      const Tensor back = unshard_tensor(views, s);
      EXPECT_TRUE(std::equal(back.span().begin(), back.span().end(), whole.span().begin()));
      const Tensor lse_back = unshard_lse(lse_pieces, s);
      EXPECT_TRUE(std::equal(lse_back.span().begin(), lse_back.span().end(), lse.span().begin()));
    }
  }
}

// Every rank of a group computes every rank's tokens from its own copy of the sharding (only
// cp_rank differs): the tables must be identical, or the ring would send blocks to the wrong
// places.
TEST(DocZigzag, EveryRankComputesTheSameTable) {
  const std::vector<int64_t> lengths = short_and_long(1025, 400, 7);
  for (int P : {2, 3, 8}) {
    std::vector<std::vector<Indices>> seen(static_cast<size_t>(P));
    run_ranks(P, [&](Communicator& comm) {
      const SequenceSharding mine = packed(Layout::kDocZigzag, lengths, P, comm.rank());
      seen[static_cast<size_t>(comm.rank())] = table(mine);
    });
    for (int r = 1; r < P; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], seen[0]) << "rank " << r;
  }
}

// The busiest rank's visible (query, key) pairs over the mean (count_visible_pairs: each rank's
// queries against the whole sequence's keys, documents masked).
double busiest_over_mean(const SequenceSharding& s, bool causal) {
  AttentionParams params;
  params.causal = causal;
  Indices all(static_cast<size_t>(s.seq_len));
  std::iota(all.begin(), all.end(), int64_t{0});
  int64_t busiest = 0, total = 0;
  for (int r = 0; r < s.cp_size; ++r) {
    const int64_t n =
        count_visible_pairs(s.local_positions(r), all, s.local_docs(r), s.docs, params);
    busiest = std::max(busiest, n);
    total += n;
  }
  return static_cast<double>(busiest) * s.cp_size / static_cast<double>(total);
}

// The target of docs/design.md section 5.1: for mixed lengths the busiest rank's visible pairs
// are within 5% of the mean, causal and full, where the zigzag over the whole sequence is not.
TEST(DocZigzag, BalancesVisiblePairsOfMixedLengthsWhereTheZigzagDoesNot) {
  struct Mix {
    std::string name;
    std::vector<int64_t> lengths;
  };
  const std::vector<Mix> mixes = {
      {"issue [1,7,300,0,5,1025]", {1, 7, 300, 0, 5, 1025}},
      {"exponential mean S/16, S 4096", exponential(4096, 256.0, 11)},
      {"uniform 1..S/8, S 4096",
       [] {
         std::mt19937_64 gen(12);
         std::vector<int64_t> l;
         for (int64_t at = 0; at < 4096;) {
           l.push_back(std::min<int64_t>(1 + static_cast<int64_t>(gen() % 512), 4096 - at));
           at += l.back();
         }
         return l;
       }()},
      {"0..3 tokens mixed with long, S 4096", short_and_long(4096, 1500, 13)},
  };
  for (const Mix& mix : mixes) {
    for (int P : {4, 8}) {
      for (bool causal : {true, false}) {
        const double doc = busiest_over_mean(packed(Layout::kDocZigzag, mix.lengths, P), causal);
        const double zigzag = busiest_over_mean(packed(Layout::kZigzag, mix.lengths, P), causal);
        const std::string what =
            mix.name + (causal ? ", causal" : ", full") + ", P " + std::to_string(P);
        std::printf("[ balance  ] %s: doc_zigzag %.4f, zigzag %.4f\n", what.c_str(), doc, zigzag);
        RecordProperty(what + " doc_zigzag", std::to_string(doc));
        RecordProperty(what + " zigzag", std::to_string(zigzag));
        EXPECT_LE(doc, 1.05) << what;
        EXPECT_LT(doc, zigzag) << what;
      }
    }
  }
}

}  // namespace
}  // namespace cpattn
