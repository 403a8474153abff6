// RMSNorm forward against a double reference, backward against finite differences, and row
// independence (a shard of rows gives bitwise the rows of the whole).
#include "train/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cpattn/error.h"
#include "grad_check.h"
#include "train/model_config.h"

namespace cpattn::train {
namespace {

using namespace testing;  // grad_check.h: numeric gradients, random inputs

struct NormCase {
  int64_t n, d;
};

class RmsNormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormTest, ForwardMatchesDoubleReference) {
  const auto [n, d] = GetParam();
  const auto x = random_vector(static_cast<size_t>(n * d), 1, -2.0f, 2.0f);
  const auto g = random_vector(static_cast<size_t>(d), 2, 0.5f, 1.5f);
  std::vector<float> y(x.size());
  rmsnorm_forward(n, d, x, g, y);
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[r * d + i]) * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + kRmsNormEps);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(y[r * d + i], g[i] * x[r * d + i] * inv, 1e-5) << r << "," << i;
    }
  }
}

TEST_P(RmsNormTest, BackwardMatchesFiniteDifferences) {
  const int64_t n = GetParam().n, d = GetParam().d;
  auto x = random_vector(static_cast<size_t>(n * d), 3, -2.0f, 2.0f);
  auto g = random_vector(static_cast<size_t>(d), 4, 0.5f, 1.5f);
  const auto w = random_vector(x.size(), 5);
  std::vector<float> y(x.size());
  auto loss = [&] {
    rmsnorm_forward(n, d, x, g, y);
    return weighted_sum(y, w);
  };
  std::vector<float> dx(x.size()), dg(g.size(), 0.0f);
  rmsnorm_backward(n, d, w, x, g, dx, dg);
  expect_grad_near(dx, numeric_grad(x, loss), 2e-3, "dx");
  expect_grad_near(dg, numeric_grad(g, loss), 2e-3, "dgain");
}

TEST_P(RmsNormTest, ShardOfRowsIsBitwiseTheRowsOfTheWhole) {
  const auto [n, d] = GetParam();
  const auto x = random_vector(static_cast<size_t>(n * d), 6);
  const auto g = random_vector(static_cast<size_t>(d), 7);
  std::vector<float> all(x.size());
  rmsnorm_forward(n, d, x, g, all);
  const int64_t first = n / 2;
  std::vector<float> part(static_cast<size_t>((n - first) * d));
  rmsnorm_forward(n - first, d, std::span(x).subspan(static_cast<size_t>(first * d)), g, part);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + first * d));
}

INSTANTIATE_TEST_SUITE_P(Sizes, RmsNormTest,
                         ::testing::Values(NormCase{1, 1}, NormCase{3, 7}, NormCase{5, 16},
                                           NormCase{9, 33}),
                         [](const ::testing::TestParamInfo<NormCase>& p) {
                           return detail::str_cat("N", p.param.n, "_d", p.param.d);
                         });

TEST(RmsNorm, ZeroRowStaysFiniteAndGradientMayAliasDy) {
  const std::vector<float> x(4, 0.0f), g(4, 1.0f);
  std::vector<float> y(4, 1.0f);
  rmsnorm_forward(1, 4, x, g, y);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  const auto xs = random_vector(8, 8), gs = random_vector(4, 9), dy = random_vector(8, 10);
  std::vector<float> dx(8), dg1(4), dg2(4), inplace = dy;
  rmsnorm_backward(2, 4, dy, xs, gs, dx, dg1);
  rmsnorm_backward(2, 4, inplace, xs, gs, inplace, dg2);
  EXPECT_EQ(dx, inplace);
}

TEST(RmsNorm, SizeErrors) {
  const std::vector<float> x(6), g(4);
  std::vector<float> y(6);
  EXPECT_THROW(rmsnorm_forward(2, 3, x, g, y), Error);
  EXPECT_THROW(rmsnorm_forward(2, 0, {}, {}, {}), Error);
}

}  // namespace
}  // namespace cpattn::train
