// GELU (tanh) known values and derivative; the MLP block's backward against finite differences.
#include "train/mlp.h"

#include <gtest/gtest.h>

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
