// Ring properties beyond parity: dropout masks identical to cp=1, bitwise determinism, the exact
// message counts of docs/ring.md, failure without hangs, argument checks, load balance, memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

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
    const auto q = shard_token_indices(layout, S, P, r);
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
