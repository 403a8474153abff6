// Tile packing (pack.h). Unit-stride fp32 rows (every BSHD/BHSD/SBHD view) take vectorisable
// copies; other strides take the element loop; bf16 and fp16 elements are widened on the way
// (bf16: the bits become a binary32's high half; fp16: widen_fp16_row on unit-stride rows, else
// cpattn::fp16_to_float), both exact, so the packed tile holds exactly the input's values.
#include "kernel/isa/pack.h"

#include <cstring>

#include "kernel/isa/gemm.h"
#include "kernel/isa/simd.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

float widen_bf16(uint16_t bits) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(bits) << 16);
}

// One element of x at `offset` elements, as fp32.
float element(const ConstView& x, int64_t offset) {
  switch (x.dtype) {
    case DType::kF32:
      return x.f32()[offset];
    case DType::kBF16:
      return widen_bf16(*half_at(x, offset));
    case DType::kF16:
      return fp16_to_float(*half_at(x, offset));
  }
  return 0.0f;
}

// dst[d] = mul * x[offset + d * sd] for d < n, widened to fp32.
void load_span(const ConstView& x, int64_t offset, int64_t sd, int64_t n, float mul, float* dst) {
  switch (x.dtype) {
    case DType::kF32: {
      const float* src = x.f32() + offset;
      if (sd == 1 && mul == 1.0f) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      } else if (sd == 1) {
        for (int64_t d = 0; d < n; ++d) dst[d] = mul * src[d];
      } else {
        for (int64_t d = 0; d < n; ++d) dst[d] = mul * src[d * sd];
      }
      return;
    }
    case DType::kBF16: {
      const uint16_t* src = half_at(x, offset);
      if (sd == 1) {
        for (int64_t d = 0; d < n; ++d) dst[d] = mul * widen_bf16(src[d]);
      } else {
        for (int64_t d = 0; d < n; ++d) dst[d] = mul * widen_bf16(src[d * sd]);
      }
      return;
    }
    case DType::kF16: {
      const uint16_t* src = half_at(x, offset);
      if (sd == 1) {
        widen_fp16_row(src, n, mul, dst);
      } else {
        for (int64_t d = 0; d < n; ++d) dst[d] = mul * fp16_to_float(src[d * sd]);
      }
      return;
    }
  }
}

#if !defined(__AVX512F__)
// fp16 bits in the low half of each lane as fp32: fp16_to_float (core/dtype.cpp) lane by lane,
// in integer lanes (AVX2 and SSE2 have no fp16 conversion without F16C, which the table's avx2
// row does not require). Normal: the exponent rebiased (15 -> 127) and the mantissa shifted;
// inf and NaN: exponent 255, mantissa (the NaN payload) shifted; zero and subnormal:
// mantissa * 2^-24, exact (an integer below 2^10 times a power of two, a normal fp32), so no
// fp32 denormal is formed and the MXCSR's DAZ/FTZ cannot change it.
VF widen_fp16(VU h) {
  const VU sign = (h & 0x8000u) << 16;
  const VU exp = (h >> 10) & 0x1Fu;
  const VU mant = h & 0x3FFu;
  const VU normal = ((exp + 112u) << 23) | (mant << 13);
  const VU inf_nan = 0x7F800000u | (mant << 13);
  const VU small = (VU)as_int(__builtin_convertvector((VI)mant, VF) * 0x1p-24f);
  const VU bits = exp == 0u ? small : (exp == 0x1Fu ? inf_nan : normal);
  return as_float((VI)(bits | sign));
}
#endif

}  // namespace

void widen_fp16_row(const uint16_t* src, int64_t n, float mul, float* dst) {
  int64_t d = 0;
#if defined(__AVX512F__)
  const __m512 m = _mm512_set1_ps(mul);
  for (; d + 16 <= n; d += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d));
    // The maskz form: GCC 12's plain one warns of its undefined pass-through operand.
    _mm512_storeu_ps(dst + d, _mm512_mul_ps(m, _mm512_maskz_cvtph_ps(0xFFFF, h)));
  }
#else
  typedef uint16_t Halves __attribute__((vector_size(2 * kLanes)));
  const VF m = splat(mul);
  for (; d + kLanes <= n; d += kLanes) {
    Halves h;
    std::memcpy(&h, src + d, sizeof h);
    store(dst + d, m * widen_fp16(__builtin_convertvector(h, VU)));
  }
#endif
  for (; d < n; ++d) dst[d] = mul * fp16_to_float(src[d]);
}

// Every helper returns at once for a zero head dim: there is nothing to copy, and the operand
// may then have null data, so not even a row address may be formed.
void pack_rows(const ConstView& x, TileRows t, float mul, float* dst, int64_t ld) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  for (int64_t i = 0; i < t.rows; ++i) {
    load_span(x, x.offset(t.b, t.begin + i, t.h, 0), sd, dim, mul, dst + i * ld);
  }
}

void pack_panels(const ConstView& x, TileRows t, float* dst) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t dim_pad = round_up_nr(dim);
  for (int64_t i = 0; i < t.rows; ++i) {
    const int64_t row = x.offset(t.b, t.begin + i, t.h, 0);
    for (int64_t d0 = 0; d0 < dim_pad; d0 += kNr) {
      float* out = dst + d0 * t.rows + i * kNr;  // panel d0 / kNr, row i
      const int64_t n = dim - d0 < kNr ? dim - d0 : kNr;
      load_span(x, row + d0 * sd, sd, n, 1.0f, out);
      for (int64_t c = n; c < kNr; ++c) out[c] = 0.0f;
    }
  }
}

void pack_panels_transposed(const ConstView& x, TileRows t, float mul, float* dst) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t rows_pad = round_up_nr(t.rows);
  for (int64_t i0 = 0; i0 < rows_pad; i0 += kNr) {
    // One panel: kNr rows read in parallel, written d-major so the stores are contiguous.
    float* panel = dst + i0 * dim;
    const int64_t n = t.rows - i0 < kNr ? t.rows - i0 : kNr;
    int64_t row[kNr];
    for (int64_t r = 0; r < n; ++r) row[r] = x.offset(t.b, t.begin + i0 + r, t.h, 0);
    for (int64_t d = 0; d < dim; ++d) {
      float* out = panel + d * kNr;
      if (x.dtype == DType::kF32) {
        for (int64_t r = 0; r < n; ++r) out[r] = mul * x.f32()[row[r] + d * sd];
      } else {
        for (int64_t r = 0; r < n; ++r) out[r] = mul * element(x, row[r] + d * sd);
      }
      for (int64_t r = n; r < kNr; ++r) out[r] = 0.0f;
    }
  }
}

void prefetch_rows(const ConstView& x, TileRows t) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t esize = x.dtype == DType::kF32 ? 4 : 2;
  const int64_t step = sd == 1 ? 64 / esize : 1;  // 64-byte cache lines
  const auto* base = reinterpret_cast<const char*>(x.data);
  for (int64_t i = 0; i < t.rows; ++i) {
    const int64_t row = x.offset(t.b, t.begin + i, t.h, 0);
    for (int64_t d = 0; d < dim; d += step) __builtin_prefetch(base + (row + d * sd) * esize, 0, 2);
  }
}

void store_row(const View& x, int64_t b, int64_t s, int64_t h, const float* src, float mul,
               bool accumulate) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t row = x.offset(b, s, h, 0);
  if (x.dtype == DType::kF32) {
    float* dst = x.f32() + row;
    if (mul == 1.0f) {
      for (int64_t d = 0; d < dim; ++d) dst[d * sd] = accumulate ? dst[d * sd] + src[d] : src[d];
    } else {
      for (int64_t d = 0; d < dim; ++d) {
        dst[d * sd] = accumulate ? dst[d * sd] + src[d] * mul : src[d] * mul;
      }
    }
    return;
  }
  auto* dst = reinterpret_cast<uint16_t*>(x.data) + row;
  for (int64_t d = 0; d < dim; ++d) {
    float value = src[d] * mul;
    if (accumulate) value = element(x, row + d * sd) + value;
    store_from_float(x.dtype, dst + d * sd, value);
  }
}

void store_zero_row(const View& x, int64_t b, int64_t s, int64_t h) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t row = x.offset(b, s, h, 0);
  if (x.dtype == DType::kF32) {
    for (int64_t d = 0; d < dim; ++d) x.f32()[row + d * sd] = 0.0f;
    return;
  }
  auto* dst = reinterpret_cast<uint16_t*>(x.data) + row;
  for (int64_t d = 0; d < dim; ++d) dst[d * sd] = 0;  // +0 in bf16 and fp16
}

void row_dots(const ConstView& dout, const ConstView& out, TileRows t, float* d) {
  constexpr int kSums = 16;
  const int64_t dim = dout.shape[3], sa = dout.stride[3], sb = out.stride[3];
  const bool fp32 = dout.dtype == DType::kF32 && out.dtype == DType::kF32;
  for (int64_t i = 0; i < t.rows; ++i) {
    float acc[kSums] = {};
    if (dim > 0 && fp32) {
      const float* a = &dout(t.b, t.begin + i, t.h, 0);
      const float* b = &out(t.b, t.begin + i, t.h, 0);
      int64_t c = 0;
      if (sa == 1 && sb == 1) {
        for (; c + kSums <= dim; c += kSums) {
          for (int l = 0; l < kSums; ++l) acc[l] += a[c + l] * b[c + l];
        }
      }
      for (; c < dim; ++c) acc[c % kSums] += a[c * sa] * b[c * sb];
    } else if (dim > 0) {
      // The same sums in the same order on the widened elements.
      const int64_t ra = dout.offset(t.b, t.begin + i, t.h, 0);
      const int64_t rb = out.offset(t.b, t.begin + i, t.h, 0);
      for (int64_t c = 0; c < dim; ++c) {
        acc[c % kSums] += element(dout, ra + c * sa) * element(out, rb + c * sb);
      }
    }
    for (int w = kSums / 2; w > 0; w /= 2) {
      for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    }
    d[i] = acc[0];
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
