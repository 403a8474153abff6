// The planner (plan.h): its bytes and messages per rank are what the strategies send (CpStats
// of a real run) and its peak bytes what they hold (MemoryCounter of a real run), masks and
// documents shape its compute and the ring's traffic, impossible strategies are flagged, and
// recommend() picks the fastest feasible one.
#include "cpattn/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/error.h"
#include "support/errors.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

PlanProblem plan_problem(int P, Layout layout, bool causal) {
  PlanProblem p;
  p.S = 96;
  p.Hq = 8;
  p.Hkv = 2;
  p.Dqk = 16;
  p.Dv = 8;
  p.params.causal = causal;
  p.layout = layout;
  p.cp_size = P;
  return p;
}

// The largest bytes and messages any rank sent in a real forward + backward of `run`.
std::pair<int64_t, int64_t> busiest_traffic(const reference::Problem& p, RingRun run) {
  std::vector<CpStats> stats(static_cast<size_t>(run.cp_size));
  run.stats = stats;
  run_ring(p, run);
  int64_t bytes = 0, messages = 0;
  for (const CpStats& s : stats) {
    bytes = std::max(bytes, s.bytes_sent);
    messages = std::max(messages, s.messages_sent);
  }
  return {bytes, messages};
}

// The planner's busiest-rank bytes and messages equal the largest CpStats of a real forward +
// backward (every layout, causal: the ring's relay is pruned on contiguous; even and uneven
// shards).
TEST(Plan, BytesAndMessagesAreWhatTheStrategiesSend) {
  for (const int P : {4, 8}) {
    for (const Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
      for (const int64_t S : {96, 97}) {  // 97: uneven shards, the largest sends the most
        PlanProblem pp = plan_problem(P, layout, true);
        pp.S = S;
        reference::CaseSpec spec;
        spec.mask = reference::MaskKind::kCausal;
        spec.dims = {1, pp.S, pp.S, pp.Hq, pp.Hkv, pp.Dqk, pp.Dv};
        spec.seed = 3;
        const reference::Problem p = reference::make_problem(spec);
        for (const StrategyEstimate& e : plan_strategies(pp, {}, {})) {
          SCOPED_TRACE(strategy_name(e.strategy) + " " + layout_name(layout) + " P " +
                       std::to_string(P) + " S " + std::to_string(S));
          ASSERT_TRUE(e.feasible) << e.reason;
          RingRun run{P, layout};
          run.strategy = e.strategy;
          const auto [bytes, messages] = busiest_traffic(p, run);
          EXPECT_EQ(static_cast<int64_t>(e.bytes_sent), bytes);
          EXPECT_EQ(e.messages, messages);
          EXPECT_GT(e.flops, 0.0);
        }
      }
    }
  }
}

// The same with short bidirectional documents at P = 8 on contiguous shards, where the ring sends
// most blocks straight from their home to the ranks that need them (RelayPlan::direct), and on
// the document-balanced layout, where every rank holds a piece of every document.
TEST(Plan, DirectBlocksBytesAndMessagesAreWhatTheRingSends) {
  for (const Layout layout : {Layout::kContiguous, Layout::kDocZigzag}) {
    PlanProblem pp = plan_problem(8, layout, false);
    for (int d = 0; d < 16; ++d) pp.doc_lengths.push_back(32 + (d * 37) % 64);  // mean 61.5
    pp.S = std::accumulate(pp.doc_lengths.begin(), pp.doc_lengths.end(), int64_t{0});
    reference::CaseSpec spec;
    spec.mask = reference::MaskKind::kDocs;
    spec.dims = {1, pp.S, pp.S, pp.Hq, pp.Hkv, pp.Dqk, pp.Dv};
    spec.seed = 5;
    reference::Problem p = reference::make_problem(spec);
    p.q_doc.clear();
    for (size_t d = 0; d < pp.doc_lengths.size(); ++d) {
      p.q_doc.insert(p.q_doc.end(), static_cast<size_t>(pp.doc_lengths[d]),
                     static_cast<int64_t>(d));
    }
    p.k_doc = p.q_doc;
    for (const StrategyEstimate& e : plan_strategies(pp, {}, {})) {
      if (e.strategy.kind != Strategy::Kind::kRing && e.strategy.kind != Strategy::Kind::kHybrid) {
        continue;
      }
      SCOPED_TRACE(strategy_name(e.strategy) + " " + layout_name(layout));
      ASSERT_TRUE(e.feasible) << e.reason;
      RingRun run{8, layout};
      run.strategy = e.strategy;
      const auto [bytes, messages] = busiest_traffic(p, run);
      EXPECT_EQ(static_cast<int64_t>(e.bytes_sent), bytes);
      EXPECT_EQ(e.messages, messages);
    }
  }
}

TEST(Plan, MasksAndDocumentsShapeComputeAndTraffic) {
  PlanProblem full = plan_problem(4, Layout::kContiguous, false);
  full.S = 1024;
  PlanProblem causal = full;
  causal.params.causal = true;
  PlanProblem docs = causal;
  docs.doc_lengths = {300, 5, 700, 19};
  const auto ring = [](const PlanProblem& p) { return plan_strategies(p, {}, {})[0]; };
  const auto ulysses = [](const PlanProblem& p) { return plan_strategies(p, {}, {})[2]; };
  // Computed pairs count whole 128 x 128 tiles the mask does not hide. Ulysses: one call over
  // the sequence's 8 x 8 tiles, 36 of them on or below the diagonal.
  EXPECT_NEAR(ulysses(causal).flops / ulysses(full).flops, 36.0 / 64.0, 1e-9);
  // Contiguous causal ring: the last rank's 2 query tiles see 7 and 8 of the 8 key tiles.
  EXPECT_NEAR(ring(causal).flops / ring(full).flops, 15.0 / 16.0, 1e-9);
  EXPECT_LT(ring(docs).bytes_sent, ring(causal).bytes_sent);
  EXPECT_LT(ring(causal).bytes_sent, ring(full).bytes_sent);
  EXPECT_LT(ring(docs).flops, ring(causal).flops);
}

// Mask slices shape the planner's compute (MaskRule classifies its tiles with them) and the
// ring's traffic (the block skip's runs see them on zigzag shards too), and the planned bytes are
// what a real run sends; sinks, softcap and ALiBi change scores, not which pairs are computed or
// what travels, so every estimate is the same with them.
TEST(Plan, MaskSlicesShapeComputeAndTrafficAndScoreFeaturesCostNothing) {
  PlanProblem causal = plan_problem(4, Layout::kZigzag, true);
  causal.S = 1024;
  PlanProblem sliced = plan_problem(4, Layout::kZigzag, false);
  sliced.S = 1024;
  for (int64_t a = 0; a < sliced.S; a += 64) {
    sliced.params.slices.push_back({a, a + 64, a, a + 64, SliceType::kCausal});
  }
  const auto ring = [](const PlanProblem& p) { return plan_strategies(p, {}, {})[0]; };
  EXPECT_LT(ring(sliced).flops, ring(causal).flops);
  EXPECT_LT(ring(sliced).bytes_sent, ring(causal).bytes_sent);
  reference::CaseSpec spec;
  spec.dims = {1, sliced.S, sliced.S, sliced.Hq, sliced.Hkv, sliced.Dqk, sliced.Dv};
  spec.seed = 7;
  reference::Problem p = reference::make_problem(spec);
  p.params.slices = sliced.params.slices;
  const auto [bytes, messages] = busiest_traffic(p, RingRun{4, Layout::kZigzag});
  EXPECT_EQ(static_cast<int64_t>(ring(sliced).bytes_sent), bytes);
  EXPECT_EQ(ring(sliced).messages, messages);
  PlanProblem scored = sliced;
  scored.params.sink.assign(8, 0.5f);
  scored.params.softcap = 30.0f;
  scored.params.alibi_slopes.assign(8, 0.25f);
  const std::vector<StrategyEstimate> plain = plan_strategies(sliced, {}, {});
  const std::vector<StrategyEstimate> with = plan_strategies(scored, {}, {});
  ASSERT_EQ(plain.size(), with.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE(strategy_name(plain[i].strategy));
    EXPECT_EQ(with[i].flops, plain[i].flops);
    EXPECT_EQ(with[i].bytes_sent, plain[i].bytes_sent);
    EXPECT_EQ(with[i].messages, plain[i].messages);
    EXPECT_EQ(with[i].peak_bytes, plain[i].peak_bytes);
    EXPECT_EQ(with[i].seconds, plain[i].seconds);
  }
  scored.params.sink.assign(3, 0.5f);  // not one per query head
  EXPECT_EQ(error_of([&] { plan_strategies(scored, {}, {}); }).code(), ErrorCode::kShapeMismatch);
}

TEST(Plan, InfeasibleStrategiesAreFlaggedAndTheFastestIsRecommended) {
  PlanProblem p = plan_problem(4, Layout::kZigzag, true);
  p.Hq = 6;
  p.Hkv = 2;
  const std::vector<StrategyEstimate> e = plan_strategies(p, {}, {});
  ASSERT_EQ(e.size(), 4u);  // ring, allgather, ulysses, hybrid:2x2
  EXPECT_FALSE(e[2].feasible);
  EXPECT_NE(e[2].reason.find("multiple of 4"), std::string::npos) << e[2].reason;
  const StrategyEstimate& best = recommend(e);
  for (const StrategyEstimate& x : e) {
    if (x.feasible) {
      EXPECT_LE(best.seconds, x.seconds);
    }
  }
  // A slow link makes the strategy that moves the fewest bytes the pick.
  PlanProblem q = plan_problem(8, Layout::kZigzag, true);
  q.S = 4096;
  const std::vector<StrategyEstimate> slow = plan_strategies(q, {1e6, 1e-3}, {});
  const StrategyEstimate& pick = recommend(slow);
  for (const StrategyEstimate& x : slow) EXPECT_LE(pick.bytes_sent, x.bytes_sent * 1.5);
  EXPECT_EQ(error_of([&] {
              PlanProblem bad = q;
              bad.doc_lengths = {5};
              plan_strategies(bad, {}, {});
            }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(candidate_strategies(8).size(), 5u);  // ring, allgather, ulysses, 2x4, 4x2
}

// LinkModel::overlap: the ring's transfers hide under its compute on a link that overlaps (the
// larger of the two) and add to it on one that does not (the sum); the all-to-all strategies
// never overlap. Outside [0, 1] the model is refused.
TEST(Plan, TheLinksOverlapDecidesWhatTheRingHides) {
  PlanProblem p = plan_problem(4, Layout::kZigzag, true);
  p.S = 4096;
  const KernelModel kernel{20e9, 0, 1e12};
  for (const double overlap : {0.0, 0.5, 1.0}) {
    SCOPED_TRACE(overlap);
    const LinkModel link{1e9, 0, overlap};
    const std::vector<StrategyEstimate> e = plan_strategies(p, link, kernel);
    const StrategyEstimate& ring = e[0];
    const double transfer = ring.bytes_sent / link.bandwidth_bytes_per_s;
    const double compute = ring.compute_seconds;
    EXPECT_NEAR(ring.seconds,
                compute + transfer - overlap * std::min(compute, transfer) + ring.copy_seconds,
                1e-9 * ring.seconds);
    const StrategyEstimate& ulysses = e[2];
    EXPECT_NEAR(ulysses.seconds,
                ulysses.compute_seconds + ulysses.comm_seconds + ulysses.copy_seconds,
                1e-9 * ulysses.seconds);
  }
  for (const double bad : {-0.1, 1.5, std::nan("")}) {
    EXPECT_EQ(error_of([&] {
                plan_strategies(p, {1e9, 0, bad}, kernel);
              }).code(),
              ErrorCode::kInvalidArgument)
        << bad;
  }
}

// Models whose figures would make a predicted time infinite (a denormal kernel rate found by
// fuzz_plan, an infinite latency, NaN) are refused, naming the figures.
TEST(Plan, ModelsThatWouldMakeTimesInfiniteAreRefused) {
  PlanProblem p = plan_problem(4, Layout::kZigzag, true);
  p.S = 512;
  const double tiny = 5.5e-318, inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<std::pair<LinkModel, KernelModel>> bad = {
      {{1e9, 1e-5, 1}, {tiny, 0, 1e9}}, {{1e9, inf, 1}, {20e9, 0, 1e9}},
      {{nan, 1e-5, 1}, {20e9, 0, 1e9}}, {{1e9, 1e-5, 1}, {20e9, 0, 0.5}},
      {{1e9, -1, 1}, {20e9, 0, 1e9}},   {{1e9, 1e-5, 1}, {20e9, -1, 1e9}}};
  for (const std::pair<LinkModel, KernelModel>& models : bad) {
    const Error e = error_of([&] { plan_strategies(p, models.first, models.second); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("plan: the link and kernel models need rates"));
  }
  for (const StrategyEstimate& e : plan_strategies(p, {1, 0, 1}, {1, 0, 1})) {
    if (e.feasible) {
      EXPECT_TRUE(std::isfinite(e.seconds)) << strategy_name(e.strategy);
    }
  }
}

// The largest over the ranks of the live bytes a forward + backward of `strategy` holds at its
// peak on the rank's MemoryCounter besides the caller's tensors (q, k, v and dout, allocated on
// it before the peak is reset): what StrategyEstimate::peak_bytes predicts. The forward's out
// and lse stay alive through the backward, as a caller's state does.
int64_t measured_peak(const PlanProblem& pp, const Strategy& strategy) {
  reference::CaseSpec spec;
  spec.dims = {pp.B, pp.S, pp.S, pp.Hq, pp.Hkv, pp.Dqk, pp.Dv};
  spec.seed = 9;
  const reference::Problem p = reference::make_problem(spec);
  const ProblemTensors whole(p);
  std::vector<int64_t> docs;
  for (size_t d = 0; d < pp.doc_lengths.size(); ++d) {
    docs.insert(docs.end(), static_cast<size_t>(pp.doc_lengths[d]), static_cast<int64_t>(d));
  }
  std::atomic<int64_t> worst{0};
  run_ranks(pp.cp_size, [&](Communicator& comm) {
    const int r = comm.rank();
    MemoryCounter* mem = &comm.memory();
    SequenceSharding seq = SequenceSharding::of(pp.layout, pp.S, pp.cp_size, r);
    seq.docs = docs;
    const auto shard = [&](const Tensor& x) { return shard_tensor(x.view(), seq, r, mem); };
    const Tensor q = shard(whole.q), k = shard(whole.k), v = shard(whole.v);
    const Tensor dout = shard(whole.dout);
    const int64_t inputs = mem->stats().live_bytes;
    mem->reset_peak();
    CpOptions options;
    options.strategy = strategy;
    const detail::CpForwardResult fwd = detail::cp_attention_forward(
        comm, q.view(), k.view(), v.view(), seq, seq, pp.params, {1, 0}, options);
    const AttentionGradients g = detail::cp_attention_backward(
        comm, dout.view(), q.view(), k.view(), v.view(), fwd.out.view(), fwd.lse.span(), seq, seq,
        pp.params, fwd.rng, options);
    const int64_t mine = mem->stats().peak_bytes - inputs;
    int64_t now = worst.load();
    while (mine > now && !worst.compare_exchange_weak(now, mine)) {
    }
  });
  return worst.load();
}

// The planner's peak bytes per rank are the measured peak of a real forward + backward, exactly,
// for every strategy: group sizes 1 to 8, even and uneven shards (97 tokens: the rank with the
// most tokens, not the one with the most work, holds the most), contiguous causal masks (the
// busiest rank is the last, the fullest the first), replicated and sharded kv heads, batches,
// windows, dropout, and short documents whose blocks the ring sends straight to the ranks that
// need them.
TEST(Plan, PredictedPeakBytesAreTheMeasuredPeak) {
  std::vector<PlanProblem> problems;
  for (const int P : {1, 2, 4, 8}) {
    for (const Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
      for (const int64_t S : {96, 97}) {
        for (const bool causal : {false, true}) {
          PlanProblem pp = plan_problem(P, layout, causal);
          pp.S = S;
          problems.push_back(pp);
        }
      }
    }
  }
  PlanProblem wide = plan_problem(4, Layout::kZigzag, false);  // B 2, Hkv 4, a window, dropout
  wide.B = 2;
  wide.Hkv = 4;
  wide.S = 130;
  wide.params.window_left = 20;
  wide.params.dropout_p = 0.1f;
  problems.push_back(wide);
  PlanProblem docs = plan_problem(8, Layout::kContiguous, false);
  for (int d = 0; d < 16; ++d) docs.doc_lengths.push_back(32 + (d * 37) % 64);
  docs.S = std::accumulate(docs.doc_lengths.begin(), docs.doc_lengths.end(), int64_t{0});
  problems.push_back(docs);
  // The document-balanced layout: short documents among long ones, causal.
  PlanProblem balanced = plan_problem(8, Layout::kDocZigzag, true);
  balanced.doc_lengths = {1, 7, 300, 2, 5, 250, 3, 1, 90};
  balanced.S =
      std::accumulate(balanced.doc_lengths.begin(), balanced.doc_lengths.end(), int64_t{0});
  problems.push_back(balanced);
  for (const PlanProblem& pp : problems) {
    for (const StrategyEstimate& e : plan_strategies(pp, {}, {})) {
      SCOPED_TRACE(strategy_name(e.strategy) + " " + layout_name(pp.layout) + " P " +
                   std::to_string(pp.cp_size) + " S " + std::to_string(pp.S) +
                   (pp.params.causal ? " causal" : "") +
                   (pp.doc_lengths.empty() ? "" : " documents"));
      ASSERT_TRUE(e.feasible) << e.reason;
      EXPECT_EQ(e.peak_bytes, static_cast<double>(measured_peak(pp, e.strategy)));
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
