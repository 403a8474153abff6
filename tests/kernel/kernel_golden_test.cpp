// Every golden attention case of tests/data/cpattn_vectors.json through the kernel, in all three
// memory layouts: agreement to ~1e-5 of each tensor's largest magnitude (README of the vectors),
// dsink included in the cases with attention sinks.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "support/metrics.h"
#include "support/vectors.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using GoldenParam = std::tuple<testing::GoldenCase, MemoryLayout>;

class KernelGolden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(KernelGolden, MatchesVectors) {
  const auto& [g, layout] = GetParam();
  const reference::Outputs got =
      reference::run_kernel(testing::golden_problem(g), {layout, 1, true});
  EXPECT_EQ(got.dsink.size(), g.dsink.size());  // outputs_near skips a tensor one side lacks
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-5));
}

TEST_P(KernelGolden, MatchesVectorsWithTwoThreads) {
  const auto& [g, layout] = GetParam();
  const reference::Outputs got =
      reference::run_kernel(testing::golden_problem(g), {layout, 2, true});
  EXPECT_EQ(got.dsink.size(), g.dsink.size());
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Vectors, KernelGolden,
                         ::testing::Combine(::testing::ValuesIn(testing::load_golden_cases()),
                                            ::testing::Values(MemoryLayout::kBSHD,
                                                              MemoryLayout::kBHSD,
                                                              MemoryLayout::kSBHD)),
                         [](const auto& p) {
                           return std::get<0>(p.param).name + "_" +
                                  memory_layout_name(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace cpattn
