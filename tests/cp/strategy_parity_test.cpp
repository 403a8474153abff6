// Every CP strategy (ring, allgather, ulysses, hybrid 2x2 / 2x4 / 4x2) against the double
// reference: gathered out/lse/dq/dk/dv within the kernel's tolerance rule over masks {full,
// causal, window, documents} x dropout {0, 0.1} for every group size, with the layouts, memory
// orders, sequence lengths (1, 7, 97; 1025 for a few; ranks with zero tokens) and head shapes
// (GQA 8/2, MQA 8/1, MHA, Dqk != Dv) spread over the cases.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/strategy.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::CaseSpec;
using reference::MaskKind;

struct StrategyCase {
  Strategy strategy;
  int cp_size;
  Layout layout;
  CaseSpec spec;  // Sq == Sk == S, positions 0..S-1
};

std::string case_name(const StrategyCase& c) {
  std::string s = strategy_name(c.strategy);
  for (char& ch : s) ch = ch == ':' ? '_' : ch;
  return s + "_cp" + std::to_string(c.cp_size) + "_" + reference::case_name(c.spec) + "_" +
         layout_name(c.layout);
}

// One strategy on one group size: the 8 mask x dropout combinations, cycling through layouts,
// memory orders, lengths and head shapes (heads[i % heads.size()]).
void add_cases(std::vector<StrategyCase>& out, Strategy strategy, int P,
               const std::vector<std::array<int64_t, 2>>& heads, uint64_t& seed) {
  const MaskKind masks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                            MaskKind::kDocsCausal};
  const Layout layouts[] = {Layout::kZigzag, Layout::kStriped, Layout::kContiguous};
  const MemoryLayout memories[] = {MemoryLayout::kBSHD, MemoryLayout::kBHSD, MemoryLayout::kSBHD};
  const int64_t lengths[] = {97, 7, 97, 1, 97, 7, 97, 97};
  int i = 0;
  for (const MaskKind mask : masks) {
    for (const float dropout : {0.0f, 0.1f}) {
      const auto& h = heads[static_cast<size_t>(i) % heads.size()];
      CaseSpec s;
      s.mask = i == 6 ? MaskKind::kDocs : mask;  // plain documents once, causal ones once
      const int64_t S = lengths[i];
      const bool odd_dims = i % 3 == 1;  // Dqk != Dv
      s.dims = {i == 5 ? 2 : 1, S, S, h[0], h[1], odd_dims ? 24 : 16, odd_dims ? 8 : 16};
      s.dropout_p = dropout;
      s.layout = memories[i % 3];
      s.seed = seed++;
      out.push_back({strategy, P, layouts[(i + P) % 3], s});
      ++i;
    }
  }
}

std::vector<StrategyCase> cases() {
  std::vector<StrategyCase> out;
  uint64_t seed = 500;
  const std::vector<std::array<int64_t, 2>> gqa = {{8, 2}, {8, 1}, {8, 8}};
  for (const int P : {1, 2, 3, 4, 8}) {
    add_cases(out, Strategy::ring(), P, gqa, seed);
    add_cases(out, Strategy::allgather(), P, gqa, seed);
    // Ulysses splits query heads over P: 6 heads at P = 3 (kv heads 3: sharded; 1: replicated).
    add_cases(out, Strategy::ulysses(), P,
              P == 3 ? std::vector<std::array<int64_t, 2>>{{6, 3}, {6, 1}} : gqa, seed);
  }
  add_cases(out, Strategy::hybrid(2, 2), 4, gqa, seed);
  add_cases(out, Strategy::hybrid(2, 4), 8, gqa, seed);
  add_cases(out, Strategy::hybrid(4, 2), 8, gqa, seed);
  // Long sequences: causal with dropout, GQA 8/2, one per strategy.
  for (const auto& [strategy, P] :
       std::vector<std::pair<Strategy, int>>{{Strategy::ring(), 4},
                                             {Strategy::allgather(), 4},
                                             {Strategy::ulysses(), 4},
                                             {Strategy::hybrid(2, 2), 4}}) {
    CaseSpec s;
    s.mask = MaskKind::kDocsCausal;
    s.dims = {1, 1025, 1025, 8, 2, 16, 16};
    s.dropout_p = 0.1f;
    s.seed = seed++;
    out.push_back({strategy, P, Layout::kZigzag, s});
  }
  return out;
}

class StrategyParity : public ::testing::TestWithParam<StrategyCase> {};

TEST_P(StrategyParity, MatchesDoubleReference) {
  const StrategyCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  RingRun run{c.cp_size, c.layout, c.spec.layout};
  run.strategy = c.strategy;
  const reference::Outputs got = run_ring(p, run);
  EXPECT_TRUE(row_passes(reference::compare(case_name(c), reference::make_oracle(p), got)));
}

INSTANTIATE_TEST_SUITE_P(Cases, StrategyParity, ::testing::ValuesIn(cases()),
                         [](const auto& tp) { return case_name(tp.param); });

}  // namespace
}  // namespace cpattn::testing
