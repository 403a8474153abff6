// Ring properties beyond parity: dropout masks identical to cp=1, bitwise determinism, the exact
// message counts of docs/ring.md, failure without hangs, argument checks, load balance, memory.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cp/ring_detail.h"
#include "cp/ring_harness.h"
#include "cpattn/error.h"
#include "support/counting_communicator.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::MaskKind;

reference::Problem small_problem(MaskKind mask, int64_t S, float dropout, uint64_t seed) {
  reference::CaseSpec s;
  s.mask = mask;
  s.dims = {1, S, S, 4, 2, 16, 16};
  s.dropout_p = dropout;
  s.seed = seed;
  return reference::make_problem(s);
}

// With q = k = 0 every visible score is 0 and p_ij = 1/S; v_j = e_j (Dv = S) makes out_i[j] =
// keep_ij / (1 - p) / S, so the output spells out the dropout mask the ring used.
TEST(RingDropout, Cp4UsesTheSameMaskBitsAsCp1AndTheContract) {
  const int64_t S = 37, Hq = 2;
  reference::Problem p;
  p.dims = {1, S, S, Hq, 1, 4, S};
  p.params.dropout_p = 0.25f;
  p.rng = {0x1234567890ABCDEFull, (3ull << 32) | 11};
  for (int64_t i = 0; i < S; ++i) p.q_pos.push_back(i), p.k_pos.push_back(i);
  p.q.assign(static_cast<size_t>(S * Hq * 4), 0.0);
  p.k.assign(static_cast<size_t>(S * 4), 0.0);
  p.v.assign(static_cast<size_t>(S * S), 0.0);
  for (int64_t j = 0; j < S; ++j) p.v[static_cast<size_t>(j * S + j)] = 1.0;
  const reference::Outputs one = run_ring(p, {1, Layout::kZigzag, MemoryLayout::kBSHD, 1, false});
  for (Layout layout : {Layout::kZigzag, Layout::kStriped}) {
    const reference::Outputs four = run_ring(p, {4, layout, MemoryLayout::kBSHD, 1, false});
    int64_t dropped = 0;
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t h = 0; h < Hq; ++h) {
        for (int64_t j = 0; j < S; ++j) {
          const size_t at = static_cast<size_t>((i * Hq + h) * S + j);
          const bool keep1 = one.out[at] != 0.0, keep4 = four.out[at] != 0.0;
          const bool want = dropout_keep(dropout_bits(p.rng, 0, h, Hq, i, j), p.params.dropout_p);
          ASSERT_EQ(keep4, keep1) << layout_name(layout) << " i " << i << " h " << h << " j " << j;
          ASSERT_EQ(keep1, want) << "i " << i << " h " << h << " j " << j;
          dropped += keep1 ? 0 : 1;
        }
      }
    }
    EXPECT_GT(dropped, 0);  // the test would be vacuous without dropped elements
  }
}

TEST(RingDeterminism, TwoRunsAreBitwiseEqual) {
  const reference::Problem p = small_problem(MaskKind::kDocsCausal, 301, 0.1f, 41);
  for (Layout layout : {Layout::kZigzag, Layout::kContiguous}) {
    const RingRun run{4, layout};
    const reference::Outputs a = run_ring(p, run), b = run_ring(p, run);
    EXPECT_TRUE(testing::outputs_bitwise_equal(a, b));
  }
}

// docs/ring.md: per rank, forward P - 1 k/v sends and receives; backward P - 1 k/v plus P dk/dv
// sends (the same receives); no collectives. A change that adds traffic fails here.
TEST(RingTraffic, MessageCountsPerRankMatchDocs) {
  const reference::Problem p = small_problem(MaskKind::kCausal, 97, 0.0f, 43);
  for (int P : {1, 2, 3, 4, 8}) {
    std::mutex mu;
    std::vector<std::array<int64_t, 4>> counts(static_cast<size_t>(P));  // fwd s/r, bwd s/r
    std::vector<int64_t> collectives(static_cast<size_t>(P));
    // Counts forward and backward separately by snapshotting after the forward's last message:
    // run twice, once forward only.
    for (bool backward : {false, true}) {
      run_ring(p, {P, Layout::kZigzag, MemoryLayout::kBSHD, 1, backward},
               [&](Communicator& inner, const std::function<void(Communicator&)>& body) {
                 CountingCommunicator c(inner);
                 body(c);
                 std::lock_guard<std::mutex> lock(mu);
                 auto& row = counts[static_cast<size_t>(c.rank())];
                 row[backward ? 2 : 0] = c.sends - (backward ? row[0] : 0);
                 row[backward ? 3 : 1] = c.recvs - (backward ? row[1] : 0);
                 collectives[static_cast<size_t>(c.rank())] += c.collectives;
               });
    }
    for (int r = 0; r < P; ++r) {
      const auto& row = counts[static_cast<size_t>(r)];
      EXPECT_EQ(row[0], P - 1) << "forward sends, cp" << P << " rank " << r;
      EXPECT_EQ(row[1], P - 1) << "forward receives, cp" << P << " rank " << r;
      const int64_t backward = P > 1 ? (P - 1) + P : 0;
      EXPECT_EQ(row[2], backward) << "backward sends, cp" << P << " rank " << r;
      EXPECT_EQ(row[3], backward) << "backward receives, cp" << P << " rank " << r;
      EXPECT_EQ(collectives[static_cast<size_t>(r)], 0);
    }
  }
}

// One rank throwing mid-ring makes every rank fail promptly with a clear error, not hang.
TEST(RingFailure, OneRankFailingReleasesAllRanks) {
  const reference::Problem p = small_problem(MaskKind::kCausal, 97, 0.0f, 47);
  for (int64_t fail_at : {1, 4}) {  // mid-forward, mid-backward (cp4: 3 sends per forward)
    const int P = 4;
    std::mutex mu;
    std::vector<std::string> errors(static_cast<size_t>(P));
    std::vector<ErrorCode> codes(static_cast<size_t>(P), ErrorCode::kInternal);
    const auto start = std::chrono::steady_clock::now();
    try {
      run_ring(p, {P, Layout::kZigzag},
               [&](Communicator& inner, const std::function<void(Communicator&)>& body) {
                 FailingCommunicator c(inner, inner.rank() == 2 ? fail_at : 1 << 30);
                 try {
                   body(c);
                 } catch (const Error& e) {
                   std::lock_guard<std::mutex> lock(mu);
                   errors[static_cast<size_t>(c.rank())] = e.what();
                   codes[static_cast<size_t>(c.rank())] = e.code();
                   throw;
                 }
               });
      FAIL() << "run_ranks should rethrow the failure";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0) << "ranks waited for a dead peer";
    for (int r = 0; r < P; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " fail_at " + std::to_string(fail_at));
      ASSERT_FALSE(errors[static_cast<size_t>(r)].empty()) << "rank finished despite the failure";
      if (r == 2) {
        EXPECT_NE(errors[2].find("injected failure"), std::string::npos) << errors[2];
      } else {
        EXPECT_EQ(codes[static_cast<size_t>(r)], ErrorCode::kPeerFailed) << errors[r];
        EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 2"), std::string::npos) << errors[r];
      }
    }
  }
}

// Bad arguments are rejected on every rank before any message is posted.
TEST(RingArguments, ShapeErrorsNameExpectedAndGot) {
  std::atomic<int> shape_errors{0};
  run_ranks(2, [&](Communicator& comm) {
    SequenceSharding s = SequenceSharding::of(Layout::kZigzag, 10, 2, comm.rank());
    const Tensor q({1, 5, 2, 8}), k({1, 4, 1, 8}), v({1, 5, 1, 8});
    CountingCommunicator counting(comm);
    try {
      detail::ring_attention_forward(counting, q.view(), k.view(), v.view(), s, s, {}, {});
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
      EXPECT_NE(std::string(e.what()).find("k must have shape [B, Sk_local, Hkv, Dqk] = "
                                           "[1, 5, 1, 8], got [1, 4, 1, 8]"),
                std::string::npos)
          << e.what();
      ++shape_errors;
    }
    EXPECT_EQ(counting.sends + counting.recvs, 0);
    SequenceSharding wrong = s;
    wrong.cp_rank = 1 - comm.rank();
    EXPECT_THROW(
        detail::ring_attention_forward(comm, q.view(), v.view(), v.view(), wrong, wrong, {}, {}),
        Error);
    AttentionParams bad;
    bad.dropout_p = 1.0f;
    EXPECT_THROW(detail::ring_attention_forward(comm, q.view(), v.view(), v.view(), s, s, bad, {}),
                 Error);
  });
  EXPECT_EQ(shape_errors.load(), 2);
}

// Visible (q, k) pairs each rank computes; busiest / mean for causal attention at P = 8.
double causal_imbalance(Layout layout, int64_t S, int P) {
  AttentionParams causal;
  causal.causal = true;
  std::vector<int64_t> all(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) all[static_cast<size_t>(i)] = i;
  int64_t busiest = 0, total = 0;
  for (int r = 0; r < P; ++r) {
    const auto q = shard_token_indices(SequenceSharding::of(layout, S, P, r), r);
    const int64_t n = count_visible_pairs(q, all, {}, {}, causal);
    busiest = std::max(busiest, n);
    total += n;
  }
  return static_cast<double>(busiest) / (static_cast<double>(total) / P);
}

TEST(RingLoadBalance, ZigzagAndStripedWithinFivePercentAtCp8) {
  EXPECT_LE(causal_imbalance(Layout::kZigzag, 8192, 8), 1.05);
  EXPECT_LE(causal_imbalance(Layout::kStriped, 8192, 8), 1.05);
  // Contrast: contiguous puts ~2x the mean on the last rank.
  EXPECT_GT(causal_imbalance(Layout::kContiguous, 8192, 8), 1.8);
}

TEST(RingBlockSkip, HiddenOnlyWhenMasksHideEveryPair) {
  AttentionParams causal;
  causal.causal = true;
  const std::vector<int64_t> early = {0, 1, 2}, late = {5, 6}, mixed = {1, 7};
  EXPECT_TRUE(block_hidden(early, late, {}, {}, causal));
  EXPECT_FALSE(block_hidden(late, early, {}, {}, causal));
  EXPECT_FALSE(block_hidden(early, mixed, {}, {}, causal));
  AttentionParams window;
  window.window_left = 2;
  window.window_right = 0;
  const std::vector<int64_t> far = {0, 1, 2}, near = {3, 4};
  EXPECT_TRUE(block_hidden(late, far, {}, {}, window));
  EXPECT_FALSE(block_hidden(late, near, {}, {}, window));
  const std::vector<int64_t> docs_a = {0, 0, 1}, docs_b = {2, 2};
  EXPECT_TRUE(block_hidden(early, late, docs_a, docs_b, AttentionParams{}));
  EXPECT_TRUE(block_hidden({}, late, {}, {}, AttentionParams{}));
  // Mask slices: documents [0, 4), [4, 8), [8, 12), [12, 16) as causal slices. Zigzag-like blocks
  // (two runs each) whose bounding boxes overlap: only the runs tell that every pair is hidden.
  using Pos = std::vector<int64_t>;
  AttentionParams docs;
  for (int64_t d = 0; d < 16; d += 4)
    docs.slices.push_back({d, d + 4, d, d + 4, SliceType::kCausal});
  const std::vector<int64_t> q_zigzag = {0, 1, 2, 3, 12, 13, 14, 15}, k_zigzag = {4, 5, 6, 7, 8, 9};
  EXPECT_NE(MaskRule(docs, false).classify(block_range(q_zigzag, {}), block_range(k_zigzag, {})),
            BlockVisibility::kHidden);
  EXPECT_TRUE(block_hidden(q_zigzag, k_zigzag, {}, {}, docs));
  EXPECT_FALSE(block_hidden(q_zigzag, Pos{3, 4, 5}, {}, {}, docs));    // 3 sees 3
  EXPECT_FALSE(block_hidden(q_zigzag, Pos{4, 13, 14}, {}, {}, docs));  // 15 sees 13 and 14
  EXPECT_TRUE(block_hidden(Pos{0, 1, 2, 3, 12}, Pos{4, 13, 14}, {}, {}, docs));  // after 12 only
  EXPECT_FALSE(block_hidden(q_zigzag, Pos{4, 12}, {}, {}, docs));                // 12 sees 12
  // Prefix-LM (bidirectional [0, 4), causal after): the prefix is visible to every query.
  AttentionParams prefix_lm;
  prefix_lm.slices = {{0, 16, 0, 4, SliceType::kFull}, {4, 16, 4, 16, SliceType::kCausal}};
  EXPECT_FALSE(block_hidden(Pos{8, 9}, Pos{2, 3}, {}, {}, prefix_lm));
  EXPECT_TRUE(block_hidden(Pos{0, 1, 8, 9}, Pos{10, 11, 15}, {}, {}, prefix_lm));
  EXPECT_TRUE(block_hidden(Pos{0, 1, 2}, Pos{5, 6}, {}, {}, prefix_lm));
  // More runs than BlockRuns::kMaxRuns (a striped block): bounded sub-ranges of the local order.
  std::vector<int64_t> striped;
  for (int64_t p = 1; p < 64; p += 4) striped.push_back(p);
  const detail::BlockRuns runs = detail::BlockRuns::of(striped, {});
  EXPECT_EQ(static_cast<int64_t>(runs.runs.size()), detail::BlockRuns::kMaxRuns);
  EXPECT_EQ(runs.runs.front().pos_min, 1);
  EXPECT_EQ(runs.runs.front().pos_max, 5);
  EXPECT_EQ(detail::BlockRuns::of(q_zigzag, {}).runs.size(), 2u);
}

// Random blocks of runs (up to 12, so some are merged into bounded sub-ranges), documents, causal
// masks, windows and mask slices of every family: a block the ring skips holds no visible pair
// by the double reference's own statement of the mask (reference::visible).
RC_GTEST_PROP(RingBlockSkip, NeverHidesAVisiblePair, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 160);
  const auto block = [&] {
    std::vector<int64_t> pos;
    const int runs = *rc::gen::inRange(0, 13);
    for (int r = 0; r < runs; ++r) {
      const int64_t begin = *rc::gen::inRange<int64_t>(0, n);
      const int64_t length = *rc::gen::inRange<int64_t>(1, 24);
      for (int64_t p = begin; p < std::min(n, begin + length); ++p) pos.push_back(p);
    }
    return pos;
  };
  const std::vector<int64_t> q_pos = block(), k_pos = block();
  const int64_t doc_length = *rc::gen::element<int64_t>(0, 0, 3, 17);  // 0: no documents
  std::vector<int64_t> q_doc, k_doc;
  if (doc_length > 0) {
    for (const int64_t p : q_pos) q_doc.push_back(p / doc_length);
    for (const int64_t p : k_pos) k_doc.push_back(p / doc_length);
  }
  AttentionParams params;
  params.causal = *rc::gen::arbitrary<bool>();
  params.window_left = *rc::gen::element<int64_t>(-1, -1, 0, 5, 40);
  params.window_right = *rc::gen::element<int64_t>(-1, -1, 0, 7);
  const MaskKind slices =
      *rc::gen::element(MaskKind::kNone, MaskKind::kPrefixLmSlices, MaskKind::kDocSlices,
                        MaskKind::kSharedPrefixSlices, MaskKind::kRandomSlices);
  params.slices = reference::make_slices(slices, n, *rc::gen::inRange<uint64_t>(1, 1000));
  const bool hidden = block_hidden(q_pos, k_pos, q_doc, k_doc, params);
  RC_TAG(hidden ? "hidden" : "needed");
  if (!hidden) return;
  for (size_t i = 0; i < q_pos.size(); ++i) {
    for (size_t j = 0; j < k_pos.size(); ++j) {
      RC_ASSERT(!reference::visible(params, q_pos[i], k_pos[j], q_doc.empty() ? 0 : q_doc[i],
                                    k_doc.empty() ? 0 : k_doc[j]));
    }
  }
}

// Peak live bytes per rank shrink ~1/P at fixed S (O(S/P) memory, no rank holds the sequence).
TEST(RingMemory, PeakBytesPerRankShrinkWithP) {
  const reference::Problem p = small_problem(MaskKind::kCausal, 1024, 0.0f, 53);
  std::vector<int64_t> peak;
  for (int P : {1, 2, 4, 8}) {
    std::atomic<int64_t> worst{0};
    run_ring(p, {P, Layout::kZigzag},
             [&](Communicator& comm, const std::function<void(Communicator&)>& body) {
               body(comm);
               int64_t now = worst.load();
               const int64_t mine = comm.memory().stats().peak_bytes;
               while (mine > now && !worst.compare_exchange_weak(now, mine)) {
               }
             });
    peak.push_back(worst.load());
  }
  // P > 1 adds the two k/v buffers, two dk/dv accumulators and the share (docs/ring.md), which
  // one rank does not need (its own k/v are the only block), so P = 2 holds more than half of
  // P = 1; from P = 2 on, doubling P halves the peak.
  EXPECT_LT(peak[1], peak[0]);
  EXPECT_LT(peak[2], 0.55 * static_cast<double>(peak[1]));
  EXPECT_LT(peak[3], 0.55 * static_cast<double>(peak[2]));
}

}  // namespace
}  // namespace cpattn::testing
