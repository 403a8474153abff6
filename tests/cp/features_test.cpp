// Attention sinks, logit softcap, ALiBi and mask slices under every CP strategy (docs/design.md
// sections 1, 5 and 9): each feature alone and combined (with windows, documents and dropout),
// every strategy the group allows at P in {2, 3, 4, 8}, GQA 8/2 and 8/1 (6/3 and 6/1 where
// Ulysses splits 3 ways), Dqk != Dv, S in {1, 7, 97, 1025}, contiguous / zigzag / striped
// shards: gathered out, lse, dq, dk, dv and dsink within the accuracy rule of the double
// reference and near the single-rank kernel, dsink bitwise the same on every rank, and the sink
// counted once per row however many ring steps a row's keys span.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "cpattn/strategy.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::CaseSpec;
using reference::MaskKind;

// What a case adds to its CaseSpec's problem.
struct Features {
  const char* name;
  MaskKind mask;
  bool sink = false;
  float softcap = 0.0f;
  bool alibi = false;
  int64_t window_left = -1;  // applied on top of the mask kind
  float dropout = 0.0f;
};

const std::vector<Features> kFeatures = {
    {"Sink", MaskKind::kNone, true},
    {"SinkCausal", MaskKind::kCausal, true},
    {"Softcap", MaskKind::kCausal, false, 3.0f},
    {"Alibi", MaskKind::kNone, false, 0.0f, true},
    // sink + softcap + ALiBi + window + documents + dropout
    {"AllDocsWindow", MaskKind::kDocsCausal, true, 5.0f, true, 30, 0.1f},
    // slices + sink + dropout, every slice family
    {"PrefixLm", MaskKind::kPrefixLmSlices, true, 0.0f, false, -1, 0.1f},
    {"DocSlices", MaskKind::kDocSlices, true, 0.0f, false, -1, 0.1f},
    {"SharedPrefix", MaskKind::kSharedPrefixSlices, true, 4.0f, true, -1, 0.1f},
    {"RandomSlices", MaskKind::kRandomSlices, true, 0.0f, false, -1, 0.1f},
};

struct FeatureCase {
  Strategy strategy;
  int cp_size;
  Layout layout;
  Features features;
  CaseSpec spec;  // Sq == Sk == S, positions 0..S-1
};

std::string case_name(const FeatureCase& c) {
  std::string s = strategy_name(c.strategy);
  for (char& ch : s) ch = ch == ':' ? '_' : ch;
  return s + "_cp" + std::to_string(c.cp_size) + "_" + c.features.name + "_" +
         reference::case_name(c.spec) + "_" + layout_name(c.layout);
}

reference::Problem problem_of(const FeatureCase& c) {
  reference::Problem p = reference::make_problem(c.spec);
  p.params.window_left = c.features.window_left;
  return p;
}

// The strategies a group of P ranks can run with heads {Hq, Hkv}.
std::vector<Strategy> strategies(int P, int64_t hq, int64_t hkv) {
  std::vector<Strategy> all = {Strategy::ring(), Strategy::allgather(), Strategy::ulysses()};
  for (int u = 2; u < P; ++u) {
    if (P % u == 0) all.push_back(Strategy::hybrid(u, P / u));
  }
  std::vector<Strategy> ok;
  for (const Strategy& s : all) {
    try {
      check_strategy(s, P, hq, hkv);
      ok.push_back(s);
    } catch (const Error&) {
    }
  }
  return ok;
}

std::vector<FeatureCase> cases() {
  std::vector<FeatureCase> out;
  const Layout layouts[] = {Layout::kZigzag, Layout::kStriped, Layout::kContiguous};
  const int64_t lengths[] = {97, 7, 97, 1, 97};
  uint64_t seed = 900;
  int i = 0;
  for (const int P : {2, 3, 4, 8}) {
    // Ulysses over 3 ranks needs 3 | Hq: 6 query heads there.
    const std::vector<std::array<int64_t, 2>> heads =
        P == 3 ? std::vector<std::array<int64_t, 2>>{{6, 3}, {6, 1}}
               : std::vector<std::array<int64_t, 2>>{{8, 2}, {8, 1}};
    for (const Features& f : kFeatures) {
      const auto& h = heads[static_cast<size_t>(i) % heads.size()];
      for (const Strategy& strategy : strategies(P, h[0], h[1])) {
        CaseSpec s;
        s.mask = f.mask;
        const int64_t S = lengths[i % 5];
        const bool odd_dims = i % 3 == 1;  // Dqk != Dv
        s.dims = {i % 7 == 3 ? 2 : 1, S, S, h[0], h[1], odd_dims ? 24 : 16, odd_dims ? 8 : 16};
        s.dropout_p = f.dropout;
        s.sink = f.sink;
        s.softcap = f.softcap;
        s.alibi = f.alibi;
        s.seed = seed++;
        out.push_back({strategy, P, layouts[i % 3], f, s});
        ++i;
      }
    }
  }
  // One long sequence per strategy: everything at once on zigzag shards.
  for (const Strategy& strategy :
       {Strategy::ring(), Strategy::allgather(), Strategy::ulysses(), Strategy::hybrid(2, 2)}) {
    CaseSpec s;
    s.mask = MaskKind::kSharedPrefixSlices;
    s.dims = {1, 1025, 1025, 8, 2, 16, 16};
    s.dropout_p = 0.1f;
    s.sink = true;
    s.softcap = 5.0f;
    s.alibi = true;
    s.seed = seed++;
    out.push_back({strategy, 4, Layout::kZigzag, kFeatures[7], s});
  }
  return out;
}

class CpFeatures : public ::testing::TestWithParam<FeatureCase> {};

TEST_P(CpFeatures, MatchesDoubleReferenceAndTheSingleRankKernel) {
  const FeatureCase& c = GetParam();
  const reference::Problem p = problem_of(c);
  RingRun run{c.cp_size, c.layout, c.spec.layout};
  run.strategy = c.strategy;
  // run_ring also checks that every rank returned the same dsink bits (ring_case.h).
  const reference::Outputs got = run_ring(p, run);
  ASSERT_EQ(got.dsink.size(), c.spec.sink ? static_cast<size_t>(c.spec.dims.Hq) : 0u);
  EXPECT_TRUE(row_passes(reference::compare(case_name(c), reference::make_oracle(p), got)));
  const reference::Outputs kernel = reference::run_kernel(p, {c.spec.layout});
  // Other ranks cut the softmax and the sums elsewhere: fp32 rounding only (the state tests'
  // cp vs cp = 1 bound).
  EXPECT_TRUE(outputs_near(got, kernel, 2e-5));
}

INSTANTIATE_TEST_SUITE_P(Cases, CpFeatures, ::testing::ValuesIn(cases()),
                         [](const auto& tp) { return case_name(tp.param); });

// Each rank's AttentionGradients::dsink, collected from the detail tier directly (not through
// the harness): the same bits on every rank, for every strategy; with CpOptions::reduce_dsink
// false each rank's own share instead, the shares summing to that total.
TEST(CpFeatures, DsinkIsTheSameBitsOnEveryRankOrEachRanksShare) {
  CaseSpec s;
  s.mask = MaskKind::kDocSlices;
  s.dims = {2, 61, 61, 8, 2, 16, 8};
  s.dropout_p = 0.1f;
  s.sink = true;
  s.softcap = 4.0f;
  s.seed = 77;
  const reference::Problem p = reference::make_problem(s);
  const ProblemTensors whole(p);
  for (const std::pair<Strategy, int>& strategy_ranks :
       std::vector<std::pair<Strategy, int>>{{Strategy::ring(), 3},
                                             {Strategy::allgather(), 4},
                                             {Strategy::ulysses(), 4},
                                             {Strategy::hybrid(2, 2), 4},
                                             {Strategy::hybrid(4, 2), 8}}) {
    const Strategy& strategy = strategy_ranks.first;
    const int P = strategy_ranks.second;
    SCOPED_TRACE(strategy_name(strategy));
    const auto run = [&](bool reduce) {
      std::mutex mu;
      std::vector<std::vector<float>> dsink(static_cast<size_t>(P));
      run_ranks(P, [&](Communicator& comm) {
        const int r = comm.rank();
        const SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, 61, P, r);
        MemoryCounter* mem = &comm.memory();
        const Tensor q = shard_tensor(whole.q.view(), seq, r, mem);
        const Tensor k = shard_tensor(whole.k.view(), seq, r, mem);
        const Tensor v = shard_tensor(whole.v.view(), seq, r, mem);
        const Tensor dout = shard_tensor(whole.dout.view(), seq, r, mem);
        CpOptions options;
        options.strategy = strategy;
        options.reduce_dsink = reduce;
        const detail::CpForwardResult f = detail::cp_attention_forward(
            comm, q.view(), k.view(), v.view(), seq, seq, p.params, p.rng, options);
        const AttentionGradients g = detail::cp_attention_backward(
            comm, dout.view(), q.view(), k.view(), v.view(), f.out.view(), f.lse.span(), seq, seq,
            p.params, f.rng, options);
        const std::lock_guard<std::mutex> lock(mu);
        dsink[static_cast<size_t>(r)].assign(g.dsink.span().begin(), g.dsink.span().end());
      });
      return dsink;
    };
    const std::vector<std::vector<float>> reduced = run(true), shares = run(false);
    ASSERT_EQ(reduced[0].size(), 8u);
    for (int r = 1; r < P; ++r) {
      EXPECT_TRUE(bitwise_equal(reduced[static_cast<size_t>(r)], reduced[0])) << "rank " << r;
    }
    bool differ = false;
    for (size_t h = 0; h < 8; ++h) {
      double sum = 0.0;
      for (int r = 0; r < P; ++r) {
        sum += shares[static_cast<size_t>(r)][h];
        differ |= shares[static_cast<size_t>(r)][h] != shares[0][h];
      }
      EXPECT_NEAR(sum, reduced[0][h], 1e-6 * std::max(1.0, std::fabs(double(reduced[0][h]))))
          << "head " << h;
    }
    EXPECT_TRUE(differ) << "the shares are not each rank's own";
  }
}

// A row's keys spread over many ring steps, or over none: the sink enters its softmax once.
// With q = k = 0 every visible score is 0, so lse_i = ln(exp(sink_h) + n_i) for n_i visible keys
// (exactly the sink for a row that sees nothing) whatever P and the layout.
TEST(CpFeatures, SinkEntersEachRowOnceWhateverTheSteps) {
  const int64_t S = 40, Hq = 2;
  reference::Problem p;
  p.dims = {1, S, S, Hq, 1, 4, 4};
  p.params.sink = {0.75f, -1.5f};
  // Queries 0..9 see no key (the slices cover only rows 10..39): lse = sink there.
  p.params.slices = {{10, S, 0, S, SliceType::kCausal}};
  for (int64_t i = 0; i < S; ++i) p.q_pos.push_back(i), p.k_pos.push_back(i);
  p.q.assign(static_cast<size_t>(S * Hq * 4), 0.0);
  p.k.assign(static_cast<size_t>(S * 4), 0.0);
  p.v.assign(static_cast<size_t>(S * 4), 1.0);
  p.dout.assign(static_cast<size_t>(S * Hq * 4), 1.0);
  for (const int P : {1, 2, 5, 8}) {
    for (const Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
      SCOPED_TRACE(::testing::Message() << "cp" << P << " " << layout_name(layout));
      const reference::Outputs got = run_ring(p, {P, layout});
      for (int64_t h = 0; h < Hq; ++h) {
        for (int64_t i = 0; i < S; ++i) {
          const double n = i < 10 ? 0.0 : static_cast<double>(i + 1);
          const double want = std::log(std::exp(double{p.params.sink[static_cast<size_t>(h)]}) + n);
          ASSERT_NEAR(got.lse[static_cast<size_t>(h * S + i)], want, 2e-6)
              << "h " << h << " i " << i;
          // out = n / (exp(sink) + n) of v's ones: 0 for rows that see nothing.
          EXPECT_NEAR(got.out[static_cast<size_t>((i * Hq + h) * 4)],
                      n / (std::exp(double{p.params.sink[static_cast<size_t>(h)]}) + n), 2e-6);
        }
      }
      EXPECT_TRUE(row_passes(reference::compare("sink once", reference::make_oracle(p), got)));
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
