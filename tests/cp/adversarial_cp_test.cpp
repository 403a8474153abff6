// Adversarial probes of ring attention: more ranks than tokens, 16 ranks, huge windows and
// positions, NaN inputs across ranks, and failures injected at every send (memory must not leak).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "cp/ring_detail.h"
#include "cp/ring_harness.h"
#include "cpattn/cp_options.h"
#include "cpattn/error.h"
#include "support/counting_communicator.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::MaskKind;

reference::Problem problem(int64_t S, MaskKind mask, float dropout_p, uint64_t seed,
                           reference::Dims dims = {1, 0, 0, 2, 1, 8, 8}) {
  reference::CaseSpec spec;
  dims.Sq = dims.Sk = S;
  spec.dims = dims;
  spec.mask = mask;
  spec.dropout_p = dropout_p;
  spec.seed = seed;
  return reference::make_problem(spec);
}

::testing::AssertionResult ring_matches_reference(const reference::Problem& p, const RingRun& run) {
  return row_passes(reference::compare("ring", reference::make_oracle(p), run_ring(p, run)));
}

// More ranks than tokens (many ranks hold nothing), S = 0 and S = 1, every layout.
TEST(CpAdversarial, MoreRanksThanTokens) {
  for (const Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
    for (const int64_t S : {1, 2, 3}) {
      const reference::Problem p = problem(S, MaskKind::kCausal, 0.2f, 40 + S);
      EXPECT_TRUE(ring_matches_reference(p, {8, layout})) << layout_name(layout) << " S=" << S;
    }
    const reference::Problem empty = problem(0, MaskKind::kCausal, 0.0f, 3);
    const reference::Outputs got = run_ring(empty, {3, layout});
    EXPECT_TRUE(got.out.empty() && got.dk.empty()) << layout_name(layout);
  }
}

// 16 in-process ranks on a 97-token causal sequence with documents and dropout.
TEST(CpAdversarial, SixteenRanksOddLength) {
  const reference::Problem p = problem(97, MaskKind::kDocsCausal, 0.1f, 5, {2, 0, 0, 4, 2, 5, 3});
  EXPECT_TRUE(ring_matches_reference(p, {16, Layout::kZigzag}));
}

// A right window of INT64_MAX means "everything to the right". The ring's block skip used to add
// it to a position (signed overflow), wrap negative, and drop every block: out 0, lse -inf.
TEST(CpAdversarial, HugeRightWindowDoesNotOverflowBlockSkip) {
  reference::Problem p = problem(40, MaskKind::kNone, 0.0f, 8);
  p.params.window_right = std::numeric_limits<int64_t>::max();
  p.params.window_left = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < 40; ++i) p.q_pos[i] = p.k_pos[i] = (int64_t{1} << 40) + i;
  EXPECT_TRUE(ring_matches_reference(p, {4, Layout::kStriped}));
  EXPECT_FALSE(block_hidden(p.q_pos, p.k_pos, {}, {}, p.params));
  EXPECT_EQ(count_visible_pairs(p.q_pos, p.k_pos, {}, {}, p.params), 40 * 40);
}

// A NaN query must come out NaN after the ring's blocks continue its online softmax, not be
// dropped as an empty row.
TEST(CpAdversarial, NaNQuerySurvivesTheMerge) {
  for (const int P : {1, 3}) {
    reference::Problem p = problem(30, MaskKind::kNone, 0.0f, 12);
    p.q[5 * 2 * 8] = std::numeric_limits<double>::quiet_NaN();  // token 5, head 0, dim 0
    const reference::Outputs got = run_ring(p, {P, Layout::kZigzag, MemoryLayout::kBSHD, 1, false});
    EXPECT_TRUE(std::isnan(got.lse[5])) << "P=" << P << " lse " << got.lse[5];
    EXPECT_TRUE(std::isnan(got.out[5 * 2 * 8])) << "P=" << P;
    EXPECT_TRUE(std::isfinite(got.lse[6])) << "P=" << P;
  }
}

// A rank failing at each of its sends (forward and backward): the call fails, and no rank's
// counted memory outlives it, whether the rank failed too or (a rank that needed nothing more
// from the failed one, e.g. when its last send went to a receive posted long before) finished.
// Relayed blocks (causal zigzag), bidirectional documents on contiguous shards at P = 4, where
// blocks 1 and 3 go straight from their home to the ranks that need them, and the other
// strategies (the hybrid's sends in its row and column sub-groups counted alike).
TEST(CpAdversarial, FailureAtEverySendLeaksNothing) {
  struct Case {
    reference::Problem p;
    RingRun run;
  };
  const auto with = [](RingRun run, Strategy strategy) {
    run.strategy = strategy;
    return run;
  };
  const reference::Dims heads{1, 0, 0, 4, 2, 8, 8};
  const std::vector<Case> cases = {
      {problem(37, MaskKind::kCausal, 0.1f, 21), {3, Layout::kZigzag}},
      {problem(40, MaskKind::kDocs, 0.1f, 22), {4, Layout::kContiguous}},
      {problem(37, MaskKind::kCausal, 0.1f, 23, heads),
       with({4, Layout::kZigzag}, Strategy::ulysses())},
      {problem(37, MaskKind::kCausal, 0.1f, 24, heads),
       with({4, Layout::kStriped}, Strategy::allgather())},
      {problem(40, MaskKind::kDocs, 0.1f, 25, heads),
       with({4, Layout::kContiguous}, Strategy::hybrid(2, 2))},
  };
  {
    SequenceSharding seq = SequenceSharding::of(Layout::kContiguous, 40, 4, 0);
    seq.docs = cases[1].p.q_doc;
    const detail::BlockTable table = detail::BlockTable::of(seq);
    const detail::RelayPlan plan(cases[1].p.params, table, table, true);
    EXPECT_FALSE(plan.direct(0) || plan.direct(2));
    EXPECT_TRUE(plan.direct(1) && plan.direct(3));
  }
  for (const Case& c : cases) {
    const int ranks = c.run.cp_size;
    // How many sends the failing rank 1 makes in a good call.
    std::vector<CpStats> stats(static_cast<size_t>(ranks));
    RingRun counted = c.run;
    counted.stats = stats;
    run_ring(c.p, counted);
    const int64_t sends = stats[1].messages_sent;
    ASSERT_GT(sends, 3);
    for (int64_t fail_at = 0; fail_at < sends; ++fail_at) {
      SCOPED_TRACE(::testing::Message()
                   << strategy_name(c.run.strategy) << " cp" << ranks << " fail_at " << fail_at);
      const int64_t process_before = process_memory().stats().live_bytes;
      std::mutex mu;
      std::vector<int64_t> live_after(static_cast<size_t>(ranks), -1);
      EXPECT_THROW(
          run_ring(c.p, c.run,
                   [&](Communicator& inner, const std::function<void(Communicator&)>& body) {
                     FailingCommunicator comm(inner, inner.rank() == 1 ? fail_at : 1 << 30);
                     const auto record = [&] {
                       const std::lock_guard<std::mutex> lock(mu);
                       live_after[static_cast<size_t>(inner.rank())] =
                           inner.memory().stats().live_bytes;
                     };
                     try {
                       body(comm);
                     } catch (const Error&) {
                       record();
                       throw;
                     }
                     record();
                   }),
          Error);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(live_after[static_cast<size_t>(r)], 0) << "rank " << r;
      }
      EXPECT_EQ(process_memory().stats().live_bytes, process_before);
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
