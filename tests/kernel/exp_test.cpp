// The vectorised exps of the softmaxes (isa/simd.h: exp_v, the backward's, and exp2_v, the
// forward's) of every ISA copy the CPU runs, against double exp and exp2 over their whole valid
// ranges, and their documented behaviour outside them.
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

// The accuracy claim of exp_v, as a test parameter: for every float x in [-86, 88],
// |exp_8(x) - e^x| <= kMaxUlp ulps of float(e^x) (e^x computed in double). Measured over every
// float of the range (2.2e9 values, tests/kernel/exp_test.cpp with kStride = 1): worst 1.010
// ulps, at x = -5.87788439. kMaxUlp leaves a few percent of margin; a broken polynomial
// coefficient or range reduction costs hundreds of ulps.
constexpr double kMaxUlp = 1.05;
// Every kStride-th float bit pattern of the range is checked (a prime stride, so the sample does
// not align with mantissa patterns): ~1.7e8 values, about a second.
constexpr uint32_t kStride = 13;

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

using ExpEntry = void (*)(const float* x, float* y, int64_t n);

// Largest error in ulps of float(f(x)) over the floats from `first` to `last` (same sign, walking
// away from zero), every kStride-th bit pattern plus `last` itself, of `exp`, one of the exps of
// an ISA copy, against f in double (std::exp or std::exp2).
double worst_ulp(ExpEntry exp, double (*f)(double), float first, float last, float* worst_x) {
  constexpr int64_t kBatch = 4096;  // a multiple of every copy's lane count
  double worst = 0.0;
  const uint32_t a = to_bits(first), b = to_bits(last);
  std::vector<float> x(kBatch), y(kBatch);
  for (uint64_t u = a; u <= b; u += uint64_t{kStride} * kBatch) {
    for (int64_t l = 0; l < kBatch; ++l) {
      x[l] = from_bits(static_cast<uint32_t>(std::min<uint64_t>(u + uint64_t{kStride} * l, b)));
    }
    if (u + uint64_t{kStride} * kBatch > b) x[kBatch - 1] = last;
    exp(x.data(), y.data(), kBatch);
    for (int64_t l = 0; l < kBatch; ++l) {
      const double exact = f(static_cast<double>(x[l]));
      const float rounded = static_cast<float>(exact);
      const double ulp =
          static_cast<double>(std::nextafter(rounded, std::numeric_limits<float>::infinity())) -
          static_cast<double>(rounded);
      const double err = std::fabs(static_cast<double>(y[l]) - exact) / ulp;
      if (err > worst) {
        worst = err;
        *worst_x = x[l];
      }
    }
  }
  return worst;
}

class ExpV : public ::testing::TestWithParam<Isa> {};

TEST_P(ExpV, WithinTheUlpBoundOverTheWholeValidRange) {
  const IsaKernels isa = isa_kernels(GetParam());
  float at_pos = 0, at_neg = 0;
  const auto exp = [](double x) { return std::exp(x); };
  const double pos = worst_ulp(isa.exp, exp, 0.0f, 88.0f, &at_pos);
  const double neg = worst_ulp(isa.exp, exp, -0.0f, -86.0f, &at_neg);
  EXPECT_LE(pos, kMaxUlp) << "at x = " << at_pos;
  EXPECT_LE(neg, kMaxUlp) << "at x = " << at_neg;
  // The bound is not vacuous: the polynomial does round (an exact exp would give <= 0.5).
  EXPECT_GT(std::max(pos, neg), 0.5);
}

TEST_P(ExpV, OutsideTheRange) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x(16, 0.0f), y(16);
  const float special[8] = {0.0f,  -86.5f, -1000.0f,      -kInf,
                            88.5f, kInf,   std::nanf(""), -std::nanf("")};
  std::copy(special, special + 8, x.begin());
  isa_kernels(GetParam()).exp(x.data(), y.data(), 16);
  EXPECT_EQ(y[0], 1.0f);  // exact at 0
  EXPECT_EQ(y[1], 0.0f);  // flushed below -86: masked scores cost no branch
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);  // -inf (a masked score) gives exactly 0
  EXPECT_EQ(y[4], kInf);  // overflow above 88
  EXPECT_EQ(y[5], kInf);
  EXPECT_TRUE(std::isnan(y[6]));  // NaN poisons its row, never reads as a masked key
  EXPECT_TRUE(std::isnan(y[7]));
}

// The softmaxes' exp (ExpInputs::kNonPositive) skips the upper clamp: on every input it
// may get (x <= 0, -inf, NaN with any payload) it must give exp's bits, or the kernel's results
// would depend on which of the two a call site names.
TEST_P(ExpV, NonPositiveInputsGiveExpsBits) {
  const IsaKernels isa = isa_kernels(GetParam());
  constexpr int64_t kBatch = 4096;
  std::vector<float> x(kBatch), y_any(kBatch), y_nonpositive(kBatch);
  const uint32_t specials[] = {to_bits(-0.0f),  to_bits(-86.0f),
                               to_bits(-87.5f), to_bits(-std::numeric_limits<float>::infinity()),
                               0x7FC00000u,  // the default NaN, and NaNs with payloads and signs
                               0xFFC00000u,     0x7FC00123u,
                               0xFFC001FFu,     0x7F800001u,
                               0xFFBFFFFFu};
  // Two entry points, not one under two names (the check below would then pass whatever exp_v
  // does).
  ASSERT_NE(isa.exp, isa.exp_nonpositive);
  int64_t checked = 0;
  // Every kStride-th bit pattern from -0 to -inf (the last batch ends at -inf), the special values
  // in the last batch's first lanes.
  for (uint64_t u = to_bits(-0.0f); u <= 0xFF800000u; u += uint64_t{kStride} * kBatch) {
    for (int64_t l = 0; l < kBatch; ++l) {
      x[l] = from_bits(
          static_cast<uint32_t>(std::min<uint64_t>(u + uint64_t{kStride} * l, 0xFF800000u)));
    }
    if (u + uint64_t{kStride} * kBatch > 0xFF800000u) {
      std::transform(std::begin(specials), std::end(specials), x.begin(), from_bits);
    }
    isa.exp(x.data(), y_any.data(), kBatch);
    isa.exp_nonpositive(x.data(), y_nonpositive.data(), kBatch);
    for (int64_t l = 0; l < kBatch; ++l) {
      ASSERT_EQ(to_bits(y_nonpositive[l]), to_bits(y_any[l]))
          << "x bits " << std::hex << to_bits(x[l]);
      ++checked;
    }
  }
  EXPECT_GT(checked, int64_t{100'000'000});
}

// exp_v and exp2_v of an array of vectors (as the softmaxes run them, 8 exps interleaved) and of
// one vector give the same bits: the entry points run a batch of 4096 floats in blocks of 8
// vectors and a call of 16 floats (two vectors on avx2, one on avx512, four on generic) one vector
// at a time.
TEST_P(ExpV, InterleavedAndSingleExpsGiveTheSameBits) {
  const IsaKernels isa = isa_kernels(GetParam());
  constexpr int64_t kBatch = 4096, kSmall = 16;
  constexpr uint64_t kSampleStride = 7 * kStride;  // ~3.6e7 values of the two ranges
  std::vector<float> x(kBatch), y_block(kBatch), y_single(kBatch);
  for (const auto& exp : {isa.exp, isa.exp_nonpositive, isa.exp2}) {
    // Every kSampleStride-th float from -0 to -inf (the softmaxes' exps) or from +0 to 88 (exp).
    const bool any = exp == isa.exp;
    const uint64_t first = to_bits(any ? 0.0f : -0.0f), last = any ? to_bits(88.0f) : 0xFF800000u;
    for (uint64_t u = first; u <= last; u += kSampleStride * kBatch) {
      for (int64_t l = 0; l < kBatch; ++l) {
        x[l] = from_bits(static_cast<uint32_t>(std::min<uint64_t>(u + kSampleStride * l, last)));
      }
      exp(x.data(), y_block.data(), kBatch);
      for (int64_t i = 0; i < kBatch; i += kSmall) exp(x.data() + i, y_single.data() + i, kSmall);
      ASSERT_EQ(0, std::memcmp(y_block.data(), y_single.data(), kBatch * sizeof(float)))
          << "from x bits " << std::hex << u;
    }
  }
}

// The forward softmax's 2^x (exp2_v) against double exp2 over [-124, 0], the range it serves
// (its inputs are (s - max) log2 e, never positive): |exp2_8(x) - 2^x| <= kMaxUlp2 ulps of
// float(2^x). Measured over every float of the range (kStride = 1): worst 0.952 ulps on avx2, at
// x = -0.496009678, and 1.227 on generic (no FMA contraction: two roundings per polynomial step),
// at x = -0.498714477. kMaxUlp2 leaves a few percent of margin over the generic copy.
constexpr double kMaxUlp2 = 1.3;

class Exp2V : public ::testing::TestWithParam<Isa> {};

TEST_P(Exp2V, WithinTheUlpBoundOverTheWholeRange) {
  const IsaKernels isa = isa_kernels(GetParam());
  float at = 0;
  const double worst = worst_ulp(
      isa.exp2, [](double x) { return std::exp2(x); }, -0.0f, -124.0f, &at);
  EXPECT_LE(worst, kMaxUlp2) << "at x = " << at;
  EXPECT_GT(worst, 0.5);  // the polynomial rounds: an exact 2^x would give <= 0.5
}

TEST_P(Exp2V, ExactPowersOfTwoAndOutsideTheRange) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x(16, 0.0f), y(16);
  const float special[10] = {0.0f,    -0.0f,  -1.0f, -37.0f,        -124.0f,
                             -124.5f, -1e30f, -kInf, std::nanf(""), -std::nanf("")};
  std::copy(special, special + 10, x.begin());
  isa_kernels(GetParam()).exp2(x.data(), y.data(), 16);
  // An integer x leaves r = 0 and p = 1: 2^x exactly (the forward's alpha when m is unchanged).
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_EQ(y[3], std::ldexp(1.0f, -37));
  EXPECT_EQ(y[4], std::ldexp(1.0f, -124));
  EXPECT_EQ(y[5], 0.0f);  // flushed below -124, like exp_v below -86
  EXPECT_EQ(y[6], 0.0f);
  EXPECT_EQ(y[7], 0.0f);          // -inf (a masked score) gives exactly 0
  EXPECT_TRUE(std::isnan(y[8]));  // NaN poisons its row, never reads as a masked key
  EXPECT_TRUE(std::isnan(y[9]));
}

INSTANTIATE_TEST_SUITE_P(Isas, Exp2V, ::testing::ValuesIn(available_isas()),
                         [](const auto& p) { return std::string(isa_name(p.param)); });

INSTANTIATE_TEST_SUITE_P(Isas, ExpV, ::testing::ValuesIn(available_isas()),
                         [](const auto& p) { return std::string(isa_name(p.param)); });

}  // namespace
}  // namespace cpattn::detail
