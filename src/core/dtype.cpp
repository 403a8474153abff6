// The dtype conversions (dtype.h): bit manipulation on binary32, binary16 and bfloat16, round to
// nearest, ties to even (IEEE 754-2019 section 4.3.1), written once here. The kernel's per-ISA code
// widens bf16 by the same bit placement and fp16 with the hardware's exact conversion (AVX-512F
// vcvtph2ps), and calls these functions for everything that rounds.
#include "cpattn/dtype.h"

#include <bit>
#include <cstring>
#include <string_view>

#include "cpattn/error.h"

namespace cpattn {

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
  }
  return "?";
}

int64_t dtype_size(DType dtype) noexcept { return dtype == DType::kF32 ? 4 : 2; }

double unit_roundoff(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32:
      return 0x1.0p-24;
    case DType::kBF16:
      return 0x1.0p-8;
    case DType::kF16:
      return 0x1.0p-11;
  }
  return 0.0;
}

DType parse_dtype(const char* name) {
  const std::string_view s = name != nullptr ? name : "";
  if (s == "fp32" || s == "float32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp16" || s == "float16") return DType::kF16;
  throw Error(ErrorCode::kInvalidArgument, detail::str_cat("unknown dtype ", detail::quoted(s),
                                                           ": expected fp32, bf16 or fp16"));
}

uint16_t float_to_bf16(float x) noexcept {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign and payload top, quiet
  }
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to even; a carry out of
  // the mantissa increments the exponent, which is right (and turns the largest values into inf).
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

float bf16_to_float(uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_fp16(float x) noexcept {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 and inf: inf
  if (a < 0x38800000u) {
    // Below 2^-14: an fp16 subnormal m * 2^-24. Shift the full 24-bit significand right and round
    // the dropped bits to nearest even. Below 2^-25 everything rounds to 0 (a shift > 24).
    const int exp = static_cast<int>(a >> 23);  // biased fp32 exponent, 0 .. 112
    if (exp < 102) return sign;                 // |x| < 2^-25: rounds to 0
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - exp;  // 14 .. 24: x = mant * 2^(exp - 150), fp16 unit 2^-24
    const uint32_t kept = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t up = rest > half || (rest == half && (kept & 1u)) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (kept + up));  // kept + up = 0x400 is the smallest normal
  }
  // Normal range: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits; a carry
  // into the exponent is right, up to 65504 (the inf cases were handled above).
  const uint32_t lsb = (a >> 13) & 1u;
  const uint32_t r = a + 0xFFFu + lsb;
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

float fp16_to_float(uint16_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  if (exp == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in fp32.
  const float mag = static_cast<float>(mant) * 0x1p-24f;
  return sign != 0 ? -mag : mag;
}

float load_as_float(DType dtype, const void* p) noexcept {
  switch (dtype) {
    case DType::kF32: {
      float x;
      std::memcpy(&x, p, sizeof x);
      return x;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t b;
      std::memcpy(&b, p, sizeof b);
      return dtype == DType::kBF16 ? bf16_to_float(b) : fp16_to_float(b);
    }
  }
  return 0.0f;
}

void store_from_float(DType dtype, void* p, float x) noexcept {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(p, &x, sizeof x);
      return;
    case DType::kBF16:
    case DType::kF16: {
      const uint16_t b = dtype == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
      std::memcpy(p, &b, sizeof b);
      return;
    }
  }
}

}  // namespace cpattn
