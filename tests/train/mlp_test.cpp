// GELU (tanh) known values and derivative; the MLP block's backward against finite differences.
#include "train/mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpattn/error.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

using namespace testing;  // grad_check.h: numeric gradients, random inputs

TEST(Gelu, KnownValues) {
  // Reference values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, 3.0f, -10.0f};
  const std::vector<double> want = {0.0, 0.8411919906, -0.1588080094, 2.9963627388, -0.0};
  std::vector<float> y(x.size());
  gelu_forward(x, y);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << x[i];
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(41, 1, -4.0f, 4.0f);
  const auto w = random_vector(x.size(), 2);
  std::vector<float> y(x.size());
  auto loss = [&] {
    gelu_forward(x, y);
    return weighted_sum(y, w);
  };
  std::vector<float> dx(x.size());
  gelu_backward(w, x, dx);
  expect_grad_near(dx, numeric_grad(x, loss), 1e-3, "gelu dx");
  EXPECT_THROW(gelu_backward(w, x, std::span(dx).first(3)), Error);
}

// Far left of zero the gate 1 / (1 + e^(-2u)) is tiny, then (e^(-2u) beyond e^88) exactly 0: y
// and dx follow the float64 formula down to 1e-33 and are 0 (not v^3 * 1e-39) beyond.
TEST(Gelu, VeryNegativeInputsFollowTheFormulaThenGiveZero) {
  const std::vector<float> x = {-9.0f, -9.4f, -9.5f, -20.0f, -1e6f, -1e13f, -1e15f};
  std::vector<float> y(x.size()), dx(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  gelu_forward(x, y);
  gelu_backward(ones, x, dx);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    const double s = 1.0 / (1.0 + std::exp(-2.0 * u));
    const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * v * v);
    const double want_y = v * s, want_dx = s + 2.0 * v * s * (1.0 - s) * du;
    EXPECT_NEAR(y[i], want_y, 1e-4 * std::abs(want_y) + 1e-37) << v;
    EXPECT_NEAR(dx[i], want_dx, 1e-4 * std::abs(want_dx) + 1e-37) << v;
    if (v <= -20.0) {
      EXPECT_EQ(y[i], 0.0f) << v;
      EXPECT_EQ(dx[i], 0.0f) << v;
    }
  }
}

struct MlpCase {
  int64_t n, d, hidden;
};

class MlpTest : public ::testing::TestWithParam<MlpCase> {};

TEST_P(MlpTest, BackwardMatchesFiniteDifferences) {
  const auto [n, d, hidden] = GetParam();
  auto x = random_vector(static_cast<size_t>(n * d), 3);
  auto w1 = random_vector(static_cast<size_t>(hidden * d), 4, -0.7f, 0.7f);
  auto w2 = random_vector(static_cast<size_t>(d * hidden), 5, -0.7f, 0.7f);
  const auto r = random_vector(x.size(), 6);
  const MlpDims dims{n, d, hidden};
  std::vector<float> y(x.size());
  auto loss = [&] {
    mlp_forward(dims, x, w1, w2, y);
    return weighted_sum(y, r);
  };
  const MlpCache cache = mlp_forward(dims, x, w1, w2, y);
  std::vector<float> dx(x.size()), dw1(w1.size()), dw2(w2.size());
  mlp_backward(dims, r, x, w1, w2, cache, dx, dw1, dw2);
  expect_grad_near(dx, numeric_grad(x, loss), 2e-3, "dx");
  expect_grad_near(dw1, numeric_grad(w1, loss), 2e-3, "dw1");
  expect_grad_near(dw2, numeric_grad(w2, loss), 2e-3, "dw2");
}

INSTANTIATE_TEST_SUITE_P(Sizes, MlpTest,
                         ::testing::Values(MlpCase{1, 1, 1}, MlpCase{3, 5, 7}, MlpCase{6, 8, 32}),
                         [](const ::testing::TestParamInfo<MlpCase>& p) {
                           return detail::str_cat("N", p.param.n, "_d", p.param.d, "_hidden",
                                                  p.param.hidden);
                         });

TEST(Mlp, CacheIsCountedAndChecked) {
  const MlpDims dims{2, 3, 5};
  const auto x = random_vector(6, 1), w1 = random_vector(15, 2), w2 = random_vector(15, 3);
  std::vector<float> y(6), dx(6), dw1(15), dw2(15);
  const auto owned = MemoryCounter::create();
  MemoryCounter& counter = *owned;
  {
    const MlpCache cache = mlp_forward(dims, x, w1, w2, y, &counter);
    EXPECT_EQ(counter.stats().live_bytes, 2 * 2 * 5 * 4);
    EXPECT_THROW(mlp_backward({1, 3, 5}, std::span(y).first(3), std::span(x).first(3), w1, w2,
                              cache, std::span(dx).first(3), dw1, dw2),
                 Error);
  }
  EXPECT_EQ(counter.stats().live_bytes, 0);
}

}  // namespace
}  // namespace cpattn::train
