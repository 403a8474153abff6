// The train/ ops' inline float exp (against libm's double exp, over every float of a range
// sampled densely, its ends and special values) and the fixed-order double sum.
#include "train/vector_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace cpattn::train {
namespace {

// Distance in units in the last place of float `got` from the exact value `want`.
double ulps(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

// exp_vectorizable over x, vectorized and multi-versioned as the ops' loops are (the copy this
// CPU runs, with its FMA contraction).
CPATTN_TRAIN_VECTOR_CLONES
void exp_all(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = detail::exp_vectorizable(x[i]);
}

TEST(ExpVectorizable, WithinOneAndAHalfUlpOverItsRange) {
  // Every 97th float of [-87, 88] (about 23 million of them) and the ends. Negative floats are
  // the bit patterns from -0 (INT32_MIN) up to -87; positive ones from 0 up to 88.
  const auto lo = std::bit_cast<int32_t>(-87.0f), hi = std::bit_cast<int32_t>(88.0f);
  std::vector<float> x = {-87.0f, 88.0f};
  for (int32_t b = std::bit_cast<int32_t>(-0.0f); b <= lo && b < 0; b += 97) {
    x.push_back(std::bit_cast<float>(b));
  }
  for (int32_t b = 0; b <= hi; b += 97) x.push_back(std::bit_cast<float>(b));
  std::vector<float> y(x.size());
  exp_all(x.data(), y.data(), x.size());
  double worst = 0.0;
  float worst_x = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = ulps(y[i], std::exp(static_cast<double>(x[i])));
    if (e > worst) worst = e, worst_x = x[i];
  }
  EXPECT_LE(worst, 1.5) << "at x = " << worst_x;
}

TEST(ExpVectorizable, OutsideTheRangeAndSpecialValues) {
  EXPECT_EQ(detail::exp_vectorizable(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_vectorizable(-87.0001f), 0.0f);
  EXPECT_EQ(detail::exp_vectorizable(-1000.0f), 0.0f);
  EXPECT_EQ(detail::exp_vectorizable(-std::numeric_limits<float>::infinity()), 0.0f);
  const float at88 = detail::exp_vectorizable(88.0f);
  EXPECT_TRUE(std::isfinite(at88));
  EXPECT_EQ(detail::exp_vectorizable(89.0f), at88);  // clamped, not +inf
  EXPECT_EQ(detail::exp_vectorizable(std::numeric_limits<float>::infinity()), at88);
  EXPECT_TRUE(std::isnan(detail::exp_vectorizable(std::numeric_limits<float>::quiet_NaN())));
}

TEST(OrderedSum, ExactForIntegersAndInTheDocumentedOrder) {
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 17u, 97u, 1025u}) {
    const double sum = detail::ordered_sum(n, [](size_t i) { return static_cast<double>(i); });
    EXPECT_EQ(sum, static_cast<double>(n) * (static_cast<double>(n) - 1.0) / 2.0) << n;
  }
  // Terms that do not add exactly: the result is the 8 partial sums (i mod 8) added in order.
  std::vector<double> t(21);
  for (size_t i = 0; i < t.size(); ++i) t[i] = 1.0 / static_cast<double>(3 * i + 1);
  double part[8] = {};
  for (size_t i = 0; i < t.size(); ++i) part[i % 8] += t[i];
  double want = 0.0;
  for (double p : part) want += p;
  EXPECT_EQ(detail::ordered_sum(t.size(), [&](size_t i) { return t[i]; }), want);
}

}  // namespace
}  // namespace cpattn::train
