// Element types of tensors and views (fp32, bf16, fp16) and the one place where values are
// converted between them (docs/design.md section 1.1, "Dtypes").
#pragma once

#include <cstdint>

namespace cpattn {

/// The element type of a Tensor or a view. fp32 is the default everywhere; bf16 and fp16 are
/// storage formats only: the kernel converts them to fp32 while it packs tiles and accumulates in
/// fp32, and rounds to them (round to nearest, ties to even) only when it writes a result.
enum class DType {
  kF32,   ///< IEEE 754 binary32
  kBF16,  ///< bfloat16: the high 16 bits of a binary32 (8 exponent bits, 7 mantissa bits)
  kF16,   ///< IEEE 754 binary16 (5 exponent bits, 10 mantissa bits; max 65504)
};

/// "fp32", "bf16", "fp16": the names `cpattn verify --dtype` and messages use.
const char* dtype_name(DType dtype) noexcept;

/// Bytes of one element: 4 for kF32, 2 for kBF16 and kF16.
int64_t dtype_size(DType dtype) noexcept;

/// The unit roundoff u of a dtype, the largest relative error of one round to nearest (half an
/// ulp of 1): 2^-24 fp32, 2^-8 bf16 (8 significant bits), 2^-11 fp16 (11).
double unit_roundoff(DType dtype) noexcept;

/// Parses "fp32" | "bf16" | "fp16" (also "float32", "bfloat16", "float16"); throws
/// Error(kInvalidArgument) naming the accepted names for anything else.
DType parse_dtype(const char* name);

/// fp32 -> bf16 bits, round to nearest, ties to even. NaN stays a (quiet) NaN of the same sign,
/// +-inf stays +-inf, values that round above bf16's largest finite value become +-inf, and
/// subnormals round like any other value (bf16 has fp32's exponent range, so fp32 subnormals map
/// to bf16 subnormals or to +-0).
uint16_t float_to_bf16(float x) noexcept;

/// bf16 bits -> fp32 (exact: the bits become the high half of a binary32).
float bf16_to_float(uint16_t bits) noexcept;

/// fp32 -> fp16 bits, round to nearest, ties to even (IEEE 754 convertFormat). |x| >= 65520 (the
/// midpoint above 65504) becomes +-inf; values below fp16's normal range round to fp16
/// subnormals (2^-24 steps) or to +-0; NaN becomes a quiet NaN of the same sign.
uint16_t float_to_fp16(float x) noexcept;

/// fp16 bits -> fp32 (exact, subnormals included).
float fp16_to_float(uint16_t bits) noexcept;

/// One element of `dtype` at `p` as fp32 (exact). p points at the element's first byte.
float load_as_float(DType dtype, const void* p) noexcept;

/// Stores x at `p` as one element of `dtype`, rounding to nearest even (kF32 stores x as is).
void store_from_float(DType dtype, void* p, float x) noexcept;

}  // namespace cpattn
