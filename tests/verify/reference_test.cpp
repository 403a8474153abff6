// Proves the double reference (src/verify/reference.h) before anything is judged by it: every
// golden case of the vectors file (forward and backward, dsink included), finite differences with
// dropout on (of dq, dk, dv and, with sinks, of dsink), and the mask predicate on hand-checked
// positions.
#include "verify/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

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
  EXPECT_EQ(got.dsink.size(), g.dsink.size());  // outputs_near skips a tensor one side lacks
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-12));
}

// The fp32 twin that sets the tolerance computes the same thing, to fp32 accuracy.
TEST_P(ReferenceGolden, Fp32TwinMatchesVectors) {
  const testing::GoldenCase& g = GetParam();
  const Outputs got = reference::attention_fp32(testing::golden_problem(g));
  EXPECT_EQ(got.dsink.size(), g.dsink.size());
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-5));
}

// Forward only must give the same out/lse and no gradients.
TEST_P(ReferenceGolden, ForwardOnlyLeavesGradientsEmpty) {
  const testing::GoldenCase& g = GetParam();
  const Outputs got = reference::attention(testing::golden_problem(g), false);
  EXPECT_TRUE(got.dq.empty() && got.dk.empty() && got.dv.empty() && got.dsink.empty());
  EXPECT_TRUE(testing::outputs_near(got, testing::golden_outputs(g), 1e-12));
}

INSTANTIATE_TEST_SUITE_P(Vectors, ReferenceGolden,
                         ::testing::ValuesIn(testing::load_golden_cases()),
                         [](const auto& p) { return p.param.name; });

// Every case the generator lists, and every feature among them: sinks (each with its dsink),
// softcaps, ALiBi slopes and all four slice types.
TEST(ReferenceGoldenFile, HasAllCases) {
  const std::vector<testing::GoldenCase> cases = testing::load_golden_cases();
  EXPECT_EQ(cases.size(), 20u);
  int sinks = 0, softcaps = 0, alibis = 0, sliced = 0;
  std::set<SliceType> types;
  for (const testing::GoldenCase& g : cases) {
    const size_t heads = !g.params.sink.empty() ? static_cast<size_t>(g.Hq) : 0;
    EXPECT_EQ(g.dsink.size(), heads) << g.name;
    sinks += heads > 0 ? 1 : 0;
    softcaps += g.params.softcap > 0.0f ? 1 : 0;
    alibis += !g.params.alibi_slopes.empty() ? 1 : 0;
    sliced += !g.params.slices.empty() ? 1 : 0;
    for (const MaskSlice& s : g.params.slices) types.insert(s.type);
  }
  EXPECT_EQ(sinks, 4);
  EXPECT_EQ(softcaps, 3);
  EXPECT_EQ(alibis, 3);
  EXPECT_EQ(sliced, 4);
  EXPECT_EQ(types.size(), 4u);
}

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

// Softcap, ALiBi and sinks with dropout: the chain rule through tanh (the scale makes the scores
// large enough for the cap to bend them), past the ALiBi constant and the sink's denominator term.
Problem features_problem(reference::MaskKind mask, uint64_t seed) {
  reference::CaseSpec spec;
  spec.mask = mask;
  spec.dims = {2, 6, 9, 4, 2, 5, 6};
  spec.positions = reference::PositionKind::kZigzag;
  spec.dropout_p = 0.3f;
  spec.seed = seed;
  spec.sink = true;
  spec.softcap = 1.5f;
  spec.alibi = true;
  Problem p = reference::make_problem(spec);
  p.params.softmax_scale = 1.3f;
  return p;
}

TEST(ReferenceFiniteDifference, SinkSoftcapAlibiDropoutCausalZigzag) {
  expect_matches_finite_differences(features_problem(reference::MaskKind::kCausal, 13));
}

TEST(ReferenceFiniteDifference, SinkSoftcapAlibiDropoutRandomSlices) {
  expect_matches_finite_differences(features_problem(reference::MaskKind::kRandomSlices, 14));
}

// dsink_h = d loss / d sink_h by central differences in the sink logits, which are floats
// (AttentionParams::sink): the step 2^-17 is a float, and so are sink_h +- 2^-17 for
// |sink_h| < 2^7 (float's ulp there is at most 2^-17; checked), so the quotient is of the very
// function the reference computes, with a step as small as the q, k, v differences' 1e-5.
void expect_dsink_matches_finite_differences(Problem p) {
  const Outputs grads = reference::attention(p);
  ASSERT_EQ(grads.dsink.size(), p.params.sink.size());
  ASSERT_FALSE(grads.dsink.empty());
  constexpr float kStep = 0x1p-17f;
  double worst = 0.0, magnitude = 0.0;
  for (size_t h = 0; h < p.params.sink.size(); ++h) {
    const float saved = p.params.sink[h];
    const float up_sink = saved + kStep, down_sink = saved - kStep;
    ASSERT_EQ(static_cast<double>(up_sink), static_cast<double>(saved) + kStep) << "not exact";
    ASSERT_EQ(static_cast<double>(down_sink), static_cast<double>(saved) - kStep) << "not exact";
    p.params.sink[h] = up_sink;
    const double up = loss(p);
    p.params.sink[h] = down_sink;
    const double down = loss(p);
    p.params.sink[h] = saved;
    const double numeric = (up - down) / (2.0 * static_cast<double>(kStep));
    worst = std::max(worst, std::fabs(numeric - grads.dsink[h]));
    magnitude = std::max(magnitude, std::fabs(numeric));
  }
  EXPECT_GT(magnitude, 0.1) << "dsink is trivial";
  EXPECT_LT(worst, 1e-7 * std::max(1.0, magnitude)) << "dsink vs finite differences";
}

TEST(ReferenceFiniteDifference, DsinkCausalZigzag) {
  expect_dsink_matches_finite_differences(features_problem(reference::MaskKind::kCausal, 13));
}

TEST(ReferenceFiniteDifference, DsinkRandomSlices) {
  expect_dsink_matches_finite_differences(features_problem(reference::MaskKind::kRandomSlices, 14));
}

// With a window that leaves rows without a visible key: their lse is the sink logit, they have
// out 0 and add nothing to dsink (D_i = 0), which the differences see too.
TEST(ReferenceFiniteDifference, DsinkWithEmptyRows) {
  Problem p = features_problem(reference::MaskKind::kCausalWindow, 15);
  p.params.window_left = 0;
  p.q_pos = {0, 1, 2, 30, 31, 32};
  p.k_pos = {10, 11, 12, 20, 21, 30, 31, 40, 41};
  const Outputs o = reference::attention(p, false);
  EXPECT_EQ(o.lse[0], static_cast<double>(p.params.sink[0]));  // (b 0, h 0, row 0) sees nothing
  EXPECT_EQ(o.out[0], 0.0);
  expect_dsink_matches_finite_differences(std::move(p));
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

// A NaN score is not a masked one: the row that meets it is NaN (out, lse, dq, and the dk, dv of
// the keys it sees), the other rows and the keys it does not see stay finite. Causal over
// positions 0, 1, 2: row 1 sees keys 0 and 1.
TEST(ReferenceEdge, NaNScoreMakesItsRowNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto causal3 = [] {
    Problem p;
    p.dims = {1, 3, 3, 1, 1, 4, 4};
    p.params.causal = true;
    p.q_pos = {0, 1, 2};
    p.k_pos = {0, 1, 2};
    for (int i = 0; i < 12; ++i) {
      p.q.push_back(0.1 * i - 0.5);
      p.k.push_back(0.3 - 0.05 * i);
      p.v.push_back(0.2 * i);
      p.dout.push_back(1.0 - 0.1 * i);
    }
    return p;
  };
  const auto row_nan = [](const std::vector<double>& x, int row) {
    for (int d = 0; d < 4; ++d) {
      if (!std::isnan(x[static_cast<size_t>(row * 4 + d)])) return false;
    }
    return true;
  };
  const auto row_finite = [](const std::vector<double>& x, int row) {
    for (int d = 0; d < 4; ++d) {
      if (!std::isfinite(x[static_cast<size_t>(row * 4 + d)])) return false;
    }
    return true;
  };

  Problem nan_query = causal3();
  nan_query.q[1 * 4 + 2] = nan;
  const Outputs a = reference::attention(nan_query);
  EXPECT_TRUE(row_nan(a.out, 1) && std::isnan(a.lse[1]) && row_nan(a.dq, 1));
  EXPECT_TRUE(row_nan(a.dk, 0) && row_nan(a.dk, 1) && row_nan(a.dv, 0) && row_nan(a.dv, 1));
  for (int row : {0, 2}) {
    EXPECT_TRUE(row_finite(a.out, row) && std::isfinite(a.lse[static_cast<size_t>(row)]) &&
                row_finite(a.dq, row))
        << row;
  }
  EXPECT_TRUE(row_finite(a.dk, 2) && row_finite(a.dv, 2));  // key 2 is after row 1

  Problem nan_key = causal3();
  nan_key.k[1 * 4 + 0] = nan;
  const Outputs b = reference::attention(nan_key);
  EXPECT_TRUE(row_finite(b.out, 0) && std::isfinite(b.lse[0]) && row_finite(b.dq, 0));
  for (int row : {1, 2})
    EXPECT_TRUE(row_nan(b.out, row) && std::isnan(b.lse[static_cast<size_t>(row)])) << row;
}

// NaN where both sides have it agrees; NaN on one side is the worst error there is.
TEST(ReferenceCompare, NaNOnBothSidesAgreesAndOnOneSideIsInfinite) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reference::max_abs_error({nan, 1.0, inf}, {nan, 1.5, inf}), 0.5);
  EXPECT_EQ(reference::max_abs_error({nan, 1.0}, {0.0, 1.0}), inf);
  EXPECT_EQ(reference::max_abs_error({0.0, 1.0}, {0.0, nan}), inf);
}

// The kernel's forward agrees with the reference on a NaN query row and on a NaN key (out and
// lse NaN in the same rows, the rest within the usual tolerance), on every thread count.
TEST(ReferenceCompare, KernelForwardMatchesTheReferenceOnNaNInputs) {
  for (const bool in_key : {false, true}) {
    reference::CaseSpec spec =
        reference::spec_of(reference::MaskKind::kCausal, {1, 150, 150, 2, 1, 32, 32},
                           reference::PositionKind::kContiguous, 0.0f, 7);
    Problem p = reference::make_problem(spec);
    (in_key ? p.k : p.q)[static_cast<size_t>(70 * (in_key ? 1 : 2) * 32 + 5)] =
        std::numeric_limits<double>::quiet_NaN();
    const reference::Oracle oracle = reference::make_oracle(p, false, DType::kF32);
    for (const int threads : {1, 2}) {
      const reference::Outputs got =
          reference::run_kernel(p, {MemoryLayout::kBSHD, threads, false});
      const reference::ErrorRow row =
          reference::compare(in_key ? "nan_key" : "nan_query", oracle, got);
      EXPECT_TRUE(row.pass()) << row.name << " threads " << threads << ": out err " << row.err[0]
                              << " tol " << row.tol[0] << ", lse err " << row.err[1];
      EXPECT_TRUE(std::isnan(got.lse[70])) << row.name;  // head 0, row 70: NaN either way
    }
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
