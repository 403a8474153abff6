// Proves the double reference (src/verify/reference.h) before anything is judged by it: every
// golden case of the vectors file (forward and backward), finite differences with dropout on, and
// the mask predicate on hand-checked positions.
#include "verify/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cpattn/error.h"
#include "support/metrics.h"
#include "support/vectors.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using reference::Outputs;
using reference::Problem;

class ReferenceGolden : public ::testing::TestWithParam<testing::GoldenCase> {};

// The vectors were computed in float64 by an independent oracle: agreement must be at rounding
// level, far below the ~1e-7 an fp32 computation reaches.
TEST_P(ReferenceGolden, MatchesVectorsInDouble) {
  const testing::GoldenCase& g = GetParam();
  const Outputs got = reference::attention(testing::golden_problem(g));
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-12));
}

// The fp32 twin that sets the tolerance computes the same thing, to fp32 accuracy.
TEST_P(ReferenceGolden, Fp32TwinMatchesVectors) {
  const testing::GoldenCase& g = GetParam();
  const Outputs got = reference::attention_fp32(testing::golden_problem(g));
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-5));
}

// Forward only must give the same out/lse and no gradients.
TEST_P(ReferenceGolden, ForwardOnlyLeavesGradientsEmpty) {
  const testing::GoldenCase& g = GetParam();
  const Outputs got = reference::attention(testing::golden_problem(g), false);
  EXPECT_TRUE(got.dq.empty() && got.dk.empty() && got.dv.empty());
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-12));
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceGolden,
                         ::testing::ValuesIn(testing::load_golden_cases()),
                         [](const auto& p) { return p.param.name; });

TEST(ReferenceGoldenFile, HasAllCases) { EXPECT_EQ(testing::load_golden_cases().size(), 11u); }

// loss = sum(dout * out) is what backward differentiates; central differences of it must give the
// reference's dq, dk, dv. The dropout mask depends on positions only, so it is a constant of
// the loss and differences across it are valid.
double loss(const Problem& p) {
  const Outputs o = reference::attention(p, false);
  double l = 0.0;
  for (size_t i = 0; i < o.out.size(); ++i) l += p.dout[i] * o.out[i];
  return l;
}

void expect_matches_finite_differences(Problem p) {
  const Outputs grads = reference::attention(p);
  constexpr double kStep = 1e-5;
  const std::array<std::pair<std::vector<double> Problem::*, const std::vector<double>*>, 3>
      inputs = {{{&Problem::q, &grads.dq}, {&Problem::k, &grads.dk}, {&Problem::v, &grads.dv}}};
  for (size_t t = 0; t < inputs.size(); ++t) {
    auto [member, grad] = inputs[t];
    std::vector<double>& x = p.*member;
    double worst = 0.0, magnitude = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + kStep;
      const double up = loss(p);
      x[i] = saved - kStep;
      const double down = loss(p);
      x[i] = saved;
      const double numeric = (up - down) / (2 * kStep);
      worst = std::max(worst, std::fabs(numeric - (*grad)[i]));
      magnitude = std::max(magnitude, std::fabs(numeric));
    }
    EXPECT_GT(magnitude, 0.1) << "gradient " << reference::kTensorNames[t + 2] << " is trivial";
    EXPECT_LT(worst, 1e-7 * std::max(1.0, magnitude))
        << "gradient " << reference::kTensorNames[t + 2] << " vs finite differences";
  }
}

TEST(ReferenceFiniteDifference, DropoutCausalGqaStriped) {
  reference::CaseSpec spec;
  spec.mask = reference::MaskKind::kCausal;
  spec.dims = {2, 5, 7, 4, 2, 6, 5};
  spec.positions = reference::PositionKind::kStriped;
  spec.dropout_p = 0.3f;
  spec.seed = 11;
  expect_matches_finite_differences(reference::make_problem(spec));
}

TEST(ReferenceFiniteDifference, DropoutWindowDocsZigzag) {
  reference::CaseSpec spec;
  spec.mask = reference::MaskKind::kDocs;
  spec.dims = {1, 9, 6, 3, 1, 4, 7};
  spec.positions = reference::PositionKind::kZigzag;
  spec.dropout_p = 0.5f;
  spec.seed = 12;
  Problem p = reference::make_problem(spec);
  p.params.window_left = 2;
  p.params.window_right = 1;
  p.params.softmax_scale = 0.7f;
  expect_matches_finite_differences(std::move(p));
}

TEST(ReferenceMask, PredicateOnHandCheckedPositions) {
  AttentionParams causal;
  causal.causal = true;
  EXPECT_TRUE(reference::visible(causal, 5, 5, 0, 0));
  EXPECT_TRUE(reference::visible(causal, 5, 0, 0, 0));
  EXPECT_FALSE(reference::visible(causal, 5, 6, 0, 0));
  AttentionParams window;
  window.window_left = 2;
  window.window_right = 1;
  EXPECT_FALSE(reference::visible(window, 10, 7, 0, 0));
  EXPECT_TRUE(reference::visible(window, 10, 8, 0, 0));
  EXPECT_TRUE(reference::visible(window, 10, 11, 0, 0));
  EXPECT_FALSE(reference::visible(window, 10, 12, 0, 0));
  AttentionParams zero_window;
  zero_window.window_left = 0;
  zero_window.window_right = 0;
  EXPECT_TRUE(reference::visible(zero_window, 4, 4, 0, 0));
  EXPECT_FALSE(reference::visible(zero_window, 4, 3, 0, 0));
  EXPECT_FALSE(reference::visible(zero_window, 4, 5, 0, 0));
  EXPECT_FALSE(reference::visible(AttentionParams{}, 4, 4, 1, 2));  // other document
  EXPECT_TRUE(reference::visible(AttentionParams{}, 4, 900, 3, 3));
}

TEST(ReferenceMask, DocumentLengthsCycle) {
  // Lengths {1, 23, 5, 120, ...}: position 0 is a document of its own, 1..23 the next.
  EXPECT_EQ(reference::document_of(0), 0);
  EXPECT_EQ(reference::document_of(1), 1);
  EXPECT_EQ(reference::document_of(23), 1);
  EXPECT_EQ(reference::document_of(24), 2);
  EXPECT_EQ(reference::document_of(1034), 9);  // the cycle is 1034 tokens long
}

TEST(ReferenceEdge, EmptyRowsHaveZeroOutputAndNegInfLse) {
  Problem p;
  p.dims = {1, 2, 3, 1, 1, 4, 4};
  p.params.causal = true;
  p.q_pos = {0, 10};
  p.k_pos = {5, 6, 7};  // row 0 sees nothing, row 1 sees everything
  p.q.assign(8, 0.5);
  p.k.assign(12, 0.25);
  p.v.assign(12, 1.0);
  p.dout.assign(8, 1.0);
  const Outputs o = reference::attention(p);
  EXPECT_EQ(o.lse[0], -std::numeric_limits<double>::infinity());
  EXPECT_NEAR(o.lse[1], std::log(3.0) + 0.5 * 0.25 * 4 * 0.5, 1e-15);  // scale 1/sqrt(4)
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(o.out[d], 0.0);
    EXPECT_EQ(o.dq[d], 0.0);
    EXPECT_NEAR(o.out[4 + d], 1.0, 1e-15);
  }
}

TEST(ReferenceChecks, RejectsWrongLengths) {
  Problem p;
  p.dims = {1, 2, 3, 1, 1, 4, 4};
  p.q_pos = {0, 1};
  p.k_pos = {0, 1, 2};
  p.q.assign(8, 0.0);
  p.k.assign(11, 0.0);  // one short
  p.v.assign(12, 0.0);
  EXPECT_THROW(reference::attention(p, false), Error);
}

}  // namespace
}  // namespace cpattn
