// The dtype conversions (cpattn/dtype.h) against their definition: round to nearest, ties to even,
// NaN, infinities, subnormals and overflow, checked bit for bit; widening exact; and typed
// Tensors and copy_view.
#include "cpattn/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpattn/error.h"
#include "cpattn/tensor.h"

namespace cpattn {
namespace {

float f(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (mantissa 0) -> 1.
  EXPECT_EQ(float_to_bf16(f(0x3F808000)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: -> 1 + 2^-6 (even).
  EXPECT_EQ(float_to_bf16(f(0x3F818000)), 0x3F82);
  // Just above and below a tie.
  EXPECT_EQ(float_to_bf16(f(0x3F808001)), 0x3F81);
  EXPECT_EQ(float_to_bf16(f(0x3F807FFF)), 0x3F80);
  // Rounding carries into the exponent: 2 - 2^-9 (all kept mantissa bits set, above the tie).
  EXPECT_EQ(float_to_bf16(f(0x3FFFC000)), 0x4000);
}

TEST(Bf16, HandlesInfNanSubnormalsAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(inf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-inf), 0xFF80);
  // Quiet NaN stays NaN; a signalling NaN whose payload sits in the low bits only must not turn
  // into inf (the plain rounding add would).
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f(0x7F800001)))));
  EXPECT_EQ(float_to_bf16(f(0xFF800001)) & 0x8000, 0x8000);  // sign kept
  // Above the largest finite bf16 (0x7F7F) by more than half an ulp: inf.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(f(0x7F7F7FFF)), 0x7F7F);
  // Subnormals: bf16 shares fp32's exponent, so they round like normals.
  EXPECT_EQ(float_to_bf16(f(0x00010000)), 0x0001);
  EXPECT_EQ(float_to_bf16(f(0x00008000)), 0x0000);  // tie to even (0)
  EXPECT_EQ(float_to_bf16(f(0x00018000)), 0x0002);  // tie to even (2)
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
}

TEST(Bf16, WideningIsExactAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float x = bf16_to_float(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(x), b << 16);
    if (!std::isnan(x)) {
      EXPECT_EQ(float_to_bf16(x), b);
    }
  }
}

TEST(Fp16, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  // 1 + 2^-11: halfway between 1 and 1 + 2^-10 -> 1 (even); 1 + 3 * 2^-11 -> 1 + 2^-9 (even).
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(float_to_fp16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3C01);
  // Carry into the exponent: 2 - 2^-12 rounds to 2.
  EXPECT_EQ(float_to_fp16(2.0f - 0x1p-12f), 0x4000);
}

TEST(Fp16, HandlesInfNanSubnormalsAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_fp16(inf), 0x7C00);
  EXPECT_EQ(float_to_fp16(-inf), 0xFC00);
  const uint16_t nan = float_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(float_to_fp16(f(0x7F800001)) & 0x03FF, 0);  // low-payload NaN stays NaN
  // Overflow: 65520 (the midpoint above 65504, tie to even = inf) and beyond are inf; just below
  // rounds to 65504.
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(float_to_fp16(-1e6f), 0xFC00);
  // Subnormals: steps of 2^-24.
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);      // tie to even (0)
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);  // tie to even (2)
  EXPECT_EQ(float_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up to the smallest normal
  EXPECT_EQ(float_to_fp16(1e-10f), 0x0000);
  EXPECT_EQ(float_to_fp16(-1e-10f), 0x8000);
  EXPECT_EQ(float_to_fp16(f(0x00000001)), 0x0000);  // an fp32 subnormal
}

TEST(Fp16, WideningIsExactAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float x = fp16_to_float(static_cast<uint16_t>(b));
    const uint32_t exp = (b >> 10) & 0x1F, mant = b & 0x3FF;
    if (exp == 0x1F) {
      EXPECT_EQ(std::isnan(x), mant != 0) << b;
      continue;
    }
    const double expected = (b & 0x8000 ? -1.0 : 1.0) *
                            (exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25));
    EXPECT_EQ(static_cast<double>(x), expected) << b;
    EXPECT_EQ(float_to_fp16(x), b) << b;
  }
}

// Against double arithmetic: the nearest representable value (ties to even) for random floats.
TEST(Fp16, MatchesNearestRepresentableOnASweep) {
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float x = f((state & 0x807FFFFFu) | (((state >> 23) % 40 + 98) << 23));  // 2^-29..2^16
    const uint16_t h = float_to_fp16(x);
    const double got = fp16_to_float(h), ax = std::fabs(static_cast<double>(x));
    if (ax >= 65520.0) {
      EXPECT_TRUE(std::isinf(got));
      continue;
    }
    // The neighbours of got must not be closer to x.
    const uint16_t up = static_cast<uint16_t>(h + 1), down = static_cast<uint16_t>(h - 1);
    for (uint16_t n : {up, down}) {
      if ((n & 0x7FFF) >= 0x7C00 || ((n ^ h) & 0x8000)) continue;
      const double e = std::fabs(static_cast<double>(fp16_to_float(n)) - x);
      const double g = std::fabs(got - x);
      EXPECT_TRUE(g < e || (g == e && (h & 1) == 0)) << x;
    }
  }
}

TEST(Dtype, NamesParseAndSizes) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(dtype_size(DType::kF32), 4);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_THROW(parse_dtype("fp8"), Error);
}

TEST(TypedTensor, StoresTwoBytesPerElementAndCopyViewConverts) {
  Tensor x({1, 3, 1, 2});
  const float values[] = {1.0f, -2.5f, 1.0f + 0x1p-8f, 3.0e-3f, 70000.0f, 0.1f};
  for (int i = 0; i < 6; ++i) x.data()[i] = values[i];
  for (DType d : {DType::kBF16, DType::kF16}) {
    const Tensor y = dense_copy(x.view(), d, MemoryLayout::kBSHD);
    EXPECT_EQ(y.dtype(), d);
    EXPECT_EQ(y.bytes().size(), 12u);
    EXPECT_THROW((void)y.span(), Error);
    const ConstView yv = y.view();
    EXPECT_EQ(yv.dtype, d);
    for (int i = 0; i < 6; ++i) {
      uint16_t bits;
      std::memcpy(&bits, y.bytes().data() + 2 * i, 2);
      EXPECT_EQ(bits, d == DType::kBF16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]));
      EXPECT_EQ(read_element(yv, 0, i / 2, 0, i % 2),
                d == DType::kBF16 ? bf16_to_float(bits) : fp16_to_float(bits));
    }
    // Back to fp32 is exact; a clone keeps the dtype and the bytes.
    Tensor back({1, 3, 1, 2});
    copy_view(yv, back.view());
    const Tensor c = y.clone();
    EXPECT_EQ(c.dtype(), d);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(back.data()[i], read_element(yv, 0, i / 2, 0, i % 2));
      EXPECT_EQ(std::memcmp(c.bytes().data(), y.bytes().data(), 12), 0);
    }
  }
}

}  // namespace
}  // namespace cpattn
