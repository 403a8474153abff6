// The vectorised tanh of logit soft-capping (isa/simd.h: tanh_v) of every ISA copy the CPU runs,
// against double tanh over every float magnitude where it is not yet +-1, and its behaviour at
// the edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpattn/isa.h"
#include "kernel/tile_plan.h"

namespace cpattn::detail {
namespace {

// The accuracy claims of tanh_v, as test parameters, for every float x with |x| <= 10 (beyond,
// tanh rounds to +-1 and so does tanh_v): |tanh_v(x) - tanh(x)| <= kMaxUlp ulps of
// float(tanh(x)), and <= kMaxAbs in absolute terms (what a capped logit, softcap * tanh, is off
// by, in units of softcap). Measured over every 7th float bit pattern of [0, 10] on every copy
// (avx2 and avx512 fuse their multiply-adds, generic does not): worst 4.39 ulps (generic 5.17)
// near x = 0.13-0.25, where the double angle's operations round a small result; worst absolute
// error 3.09 x 2^-24 (generic 3.26), about 3 ulps of a result in [0.5, 1). A wrong coefficient
// costs hundreds of ulps.
constexpr double kMaxUlp = 5.5;
constexpr double kMaxAbs = 3.5 * 0x1.0p-24;
// Every kStride-th float bit pattern of the range is checked (prime, so the sample does not align
// with mantissa patterns): ~3.5e7 values per sign.
constexpr uint32_t kStride = 31;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Largest error in ulps of float(tanh x) over every kStride-th float from `first` to `last`
// (walking away from zero; denormals included) of `isa`'s tanh, and the largest absolute error.
double worst_ulp(const IsaKernels& isa, float first, float last, float* worst_x,
                 double* worst_abs) {
  constexpr int64_t kBatch = 4096;
  double worst = 0.0;
  const uint32_t a = to_bits(first), b = to_bits(last);
  std::vector<float> x(kBatch), y(kBatch);
  for (uint64_t u = a; u <= b; u += uint64_t{kStride} * kBatch) {
    for (int64_t l = 0; l < kBatch; ++l) {
      x[l] = from_bits(static_cast<uint32_t>(std::min<uint64_t>(u + uint64_t{kStride} * l, b)));
    }
    isa.tanh(x.data(), y.data(), kBatch);
    for (int64_t l = 0; l < kBatch; ++l) {
      const double exact = std::tanh(static_cast<double>(x[l]));
      const float rounded = static_cast<float>(exact);
      const float up = std::nextafter(std::fabs(rounded), std::numeric_limits<float>::infinity());
      const double ulp = static_cast<double>(up) - std::fabs(static_cast<double>(rounded));
      *worst_abs = std::max(*worst_abs, std::fabs(static_cast<double>(y[l]) - exact));
      const double err = std::fabs(static_cast<double>(y[l]) - exact) / ulp;
      if (err > worst) {
        worst = err;
        *worst_x = x[l];
      }
    }
  }
  return worst;
}

class TanhV : public ::testing::TestWithParam<Isa> {};

TEST_P(TanhV, WithinTheUlpBound) {
  const IsaKernels isa = isa_kernels(GetParam());
  float at_pos = 0, at_neg = 0;
  double abs_pos = 0, abs_neg = 0;
  const double pos = worst_ulp(isa, 0.0f, 10.0f, &at_pos, &abs_pos);
  const double neg = worst_ulp(isa, -0.0f, -10.0f, &at_neg, &abs_neg);
  EXPECT_LE(pos, kMaxUlp) << "at x = " << at_pos;
  EXPECT_LE(neg, kMaxUlp) << "at x = " << at_neg;
  EXPECT_LE(abs_pos, kMaxAbs);
  EXPECT_LE(abs_neg, kMaxAbs);
  // Odd: the two halves are mirror images.
  EXPECT_EQ(pos, neg);
  EXPECT_EQ(abs_pos, abs_neg);
  // The bounds are not vacuous: the fp32 evaluation does round.
  EXPECT_GT(pos, 1.0);
  EXPECT_GT(abs_pos, 0.25 * 0x1.0p-24);
}

// Never beyond +-1: every float of [4, 10] (below, |tanh| < 0.9994 leaves room for the error
// bound), where the generic copy needs its clamp and the FMA copies do without.
TEST_P(TanhV, NeverBeyondOne) {
  const IsaKernels isa = isa_kernels(GetParam());
  constexpr int64_t kBatch = 4096;
  std::vector<float> x(kBatch), y(kBatch);
  float worst = 0.0f;
  for (uint32_t u = to_bits(4.0f); u <= to_bits(10.0f); u += kBatch) {
    for (int64_t l = 0; l < kBatch; ++l) x[l] = from_bits(u + static_cast<uint32_t>(l));
    isa.tanh(x.data(), y.data(), kBatch);
    for (float v : y) worst = std::max(worst, v);
  }
  EXPECT_LE(worst, 1.0f);
}

TEST_P(TanhV, EdgesAndSpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x(16, 0.0f), y(16);
  const float special[9] = {0.0f, -0.0f, 9.0f, -45.0f, 1e30f, kInf, -kInf, std::nanf(""), 1e-30f};
  std::copy(special, special + 9, x.begin());
  isa_kernels(GetParam()).tanh(x.data(), y.data(), 16);
  EXPECT_EQ(to_bits(y[0]), to_bits(0.0f));
  EXPECT_EQ(to_bits(y[1]), to_bits(-0.0f));  // the sign of zero kept
  // Saturated: within an ulp of +-1, never beyond (checked over every float of [0, 10] once;
  // the clamp makes every |x| >= 9 give the value at 9).
  for (int i : {2, 4, 5}) {
    EXPECT_LE(y[i], 1.0f);
    EXPECT_GE(y[i], 1.0f - 0x1.0p-24f);
  }
  for (int i : {3, 6}) {
    EXPECT_GE(y[i], -1.0f);
    EXPECT_LE(y[i], -1.0f + 0x1.0p-24f);
  }
  EXPECT_TRUE(std::isnan(y[7]));  // NaN propagates (a NaN score must poison its row)
  EXPECT_EQ(y[8], 1e-30f);        // tanh x = x to float precision
}

INSTANTIATE_TEST_SUITE_P(Isas, TanhV, ::testing::ValuesIn(available_isas()),
                         [](const auto& p) { return std::string(isa_name(p.param)); });

}  // namespace
}  // namespace cpattn::detail
