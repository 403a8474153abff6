// The packers' fp16 widening (isa/pack.h: widen_fp16_row) of every ISA copy the CPU runs against
// the scalar fp16_to_float, over every fp16 bit pattern, with the MXCSR's denormal flags off and
// on.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpattn/dtype.h"
#include "cpattn/isa.h"
#include "kernel/tile_plan.h"

namespace cpattn::detail {
namespace {

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Every fp16 bit pattern once, then 7 more so that n is no multiple of any lane count (the
// scalar tail runs too).
std::vector<uint16_t> every_fp16() {
  std::vector<uint16_t> h;
  for (uint32_t u = 0; u <= 0xFFFFu; ++u) h.push_back(static_cast<uint16_t>(u));
  for (uint16_t u : {0x0001, 0x03FF, 0x3C00, 0x7BFF, 0x7C00, 0x7E01, 0xFC00}) h.push_back(u);
  return h;
}

// The first index where widen_fp16_row(h, mul) differs bitwise from mul * fp16_to_float(h[i]),
// or -1.
int64_t first_mismatch(const IsaKernels& isa, const std::vector<uint16_t>& h, float mul,
                       const std::vector<float>& want) {
  std::vector<float> got(h.size(), -1.0f);
  isa.widen_fp16_row(h.data(), static_cast<int64_t>(h.size()), mul, got.data());
  for (size_t i = 0; i < h.size(); ++i) {
    if (to_bits(got[i]) != to_bits(want[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

class WidenFp16 : public ::testing::TestWithParam<Isa> {};

TEST_P(WidenFp16, EveryValueAsTheScalarConversion) {
  const IsaKernels isa = isa_kernels(GetParam());
  const std::vector<uint16_t> h = every_fp16();
  for (float mul : {1.0f, -0.5f, 0.088388f}) {
    std::vector<float> want(h.size());
    for (size_t i = 0; i < h.size(); ++i) want[i] = mul * fp16_to_float(h[i]);
    const int64_t bad = first_mismatch(isa, h, mul, want);
    EXPECT_EQ(bad, -1) << "mul " << mul << ", fp16 0x" << std::hex
                       << (bad >= 0 ? h[static_cast<size_t>(bad)] : 0);
  }
}

// torch.set_flush_denormal(True) sets DAZ and FTZ; fp16 subnormals are fp32 normals and must
// widen exactly all the same.
TEST_P(WidenFp16, DenormalFlagsDoNotChangeIt) {
  const IsaKernels isa = isa_kernels(GetParam());
  const std::vector<uint16_t> h = every_fp16();
  // volatile: 1 * x is a real multiply here as in the packers (it quiets a signalling NaN).
  const volatile float one = 1.0f;
  std::vector<float> want(h.size());
  for (size_t i = 0; i < h.size(); ++i) want[i] = one * fp16_to_float(h[i]);
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
  const int64_t bad = first_mismatch(isa, h, one, want);
  _mm_setcsr(saved);
  EXPECT_EQ(bad, -1) << "fp16 0x" << std::hex << (bad >= 0 ? h[static_cast<size_t>(bad)] : 0);
  EXPECT_EQ(to_bits(want[1]), to_bits(0x1p-24f));  // the smallest subnormal, as a check of want
}

INSTANTIATE_TEST_SUITE_P(Isas, WidenFp16, ::testing::ValuesIn(available_isas()),
                         [](const auto& p) { return std::string(isa_name(p.param)); });

}  // namespace
}  // namespace cpattn::detail
