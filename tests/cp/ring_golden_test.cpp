// The golden cases of tests/data/cpattn_vectors.json, sharded over P in {2, 3} in every layout:
// tokens are split by index and keep their given positions, document ids and the case's softcap,
// ALiBi slopes, sinks and mask slices (a case with sinks must return dsink: golden case
// sink_empty_rows_window has ranks whose queries see no key at all, whose lse is the sink).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "cp/ring_harness.h"
#include "support/metrics.h"
#include "support/vectors.h"

namespace cpattn::testing {
namespace {

class RingGolden : public ::testing::TestWithParam<std::tuple<int, Layout>> {};

TEST_P(RingGolden, EveryCaseMatchesItsKnownAnswer) {
  const auto [cp_size, layout] = GetParam();
  for (const GoldenCase& g : load_golden_cases()) {
    SCOPED_TRACE(g.name);
    const reference::Outputs got = run_ring(golden_problem(g), {cp_size, layout});
    EXPECT_TRUE(outputs_near(got, golden_outputs(g), 1e-5));
    EXPECT_EQ(got.dsink.size(), g.params.sink.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, RingGolden,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(Layout::kContiguous, Layout::kZigzag,
                                                              Layout::kStriped)),
                         [](const auto& tp) {
                           return std::string(layout_name(std::get<1>(tp.param))) + "_cp" +
                                  std::to_string(std::get<0>(tp.param));
                         });

}  // namespace
}  // namespace cpattn::testing
