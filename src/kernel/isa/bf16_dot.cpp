// The vdpbf16ps micro-kernel and the pair packers of bf16_dot.h. Compiled into every ISA copy;
// only the AVX-512-BF16 one (CPATTN_ISA_BF16_DOT) has content.
#include "kernel/isa/bf16_dot.h"

#if CPATTN_ISA_BF16_DOT

#include <immintrin.h>

#include <cstring>

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

static_assert(kLanes == 16, "the bf16 products run on 512-bit registers");

// Packed words share scratch memory with fp32 tiles: every scalar word access goes through this
// type, and vector ones through the (may_alias) intrinsic types.
typedef uint32_t Word __attribute__((may_alias));

uint32_t pair(uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; }

// C[0:MR, 0:kNr] (+)= A[0:MR, 0:2 k2_len] * panel: each k2 step loads 2 B vectors (32 columns x
// 2 k) and broadcasts MR A words, as gemm.cpp's micro-kernel does for one k.
template <int MR, bool kAccumulate>
struct DotKernel {
  static void run(int64_t k2_len, const uint32_t* a, int64_t rs, int64_t ks, const uint32_t* b,
                  float* c, int64_t ldc, const float* row_scale) {
    __m512 lo[MR], hi[MR];
    load_c<MR, kAccumulate>(c, ldc, row_scale, lo, hi,
                            [](const float* row) { return _mm512_loadu_ps(row); });
    for (int64_t k2 = 0; k2 < k2_len; ++k2) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + k2 * kNr);
      const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + k2 * kNr + kLanes);
      const Word* ak = a + k2 * ks;
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512bh am = (__m512bh)_mm512_set1_epi32(static_cast<int>(ak[m * rs]));
        lo[m] = _mm512_dpbf16_ps(lo[m], am, b0);
        hi[m] = _mm512_dpbf16_ps(hi[m], am, b1);
      }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      _mm512_storeu_ps(c + m * ldc, lo[m]);
      _mm512_storeu_ps(c + m * ldc + kLanes, hi[m]);
    }
  }
};

// The word of elements d0 and d0 + 1 of a bf16 row (stride sd, dim elements), 0 past the end.
uint32_t row_pair(const uint16_t* row, int64_t sd, int64_t dim, int64_t d0) {
  return pair(row[d0 * sd], d0 + 1 < dim ? row[(d0 + 1) * sd] : uint16_t{0});
}

// The maskz forms of the intrinsics below: GCC 12's plain ones warn of their undefined
// pass-through operand.
constexpr __mmask16 kAll = 0xFFFF;

// 16 bf16 values (as bits), each in the low half of a word.
__m512i widen_bits(__m256i bits) { return _mm512_maskz_cvtepu16_epi32(kAll, bits); }

// Words whose high halves are hi's low halves and whose low halves are lo's.
__m512i join(__m512i lo, __m512i hi) {
  return _mm512_or_si512(lo, _mm512_maskz_slli_epi32(kAll, hi, 16));
}

// 16 unit-stride bf16 values, each in the low half of a word.
__m512i widen16(const uint16_t* r) {
  return widen_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)));
}

// Words (r0[d], r1[d]) for 16 dims of two unit-stride bf16 rows; r1 null: high halves 0.
__m512i interleave16(const uint16_t* r0, const uint16_t* r1) {
  const __m512i lo = widen16(r0);
  return r1 == nullptr ? lo : join(lo, widen16(r1));
}

}  // namespace

void gemm_tile_bf16(int64_t m, int64_t n, PairsA a, PairsB b, float* c, int64_t ldc,
                    bool accumulate, const float* row_scale) {
  if (accumulate) {
    tile_loops<DotKernel, true>(m, n, a, b, c, ldc, row_scale);
  } else {
    tile_loops<DotKernel, false>(m, n, a, b, c, ldc, nullptr);
  }
}

void pack_pair_rows(const ConstView& x, TileRows t, uint32_t* dst, int64_t ld) {
  const int64_t dim = x.shape[3], sd = x.stride[3], k2 = k_pairs(dim);
  if (dim == 0) return;
  for (int64_t i = 0; i < t.rows; ++i) {
    const uint16_t* row = half_at(x, x.offset(t.b, t.begin + i, t.h, 0));
    Word* out = dst + i * ld;
    if (sd == 1) {
      std::memcpy(out, row, static_cast<size_t>(dim) * sizeof(uint16_t));
      if (dim % 2 != 0) out[k2 - 1] = row[dim - 1];  // the zero high half
    } else {
      for (int64_t w = 0; w < k2; ++w) out[w] = row_pair(row, sd, dim, 2 * w);
    }
  }
}

void pack_pair_panels_transposed(const ConstView& x, TileRows t, uint32_t* dst) {
  const int64_t dim = x.shape[3], sd = x.stride[3], k2 = k_pairs(dim);
  if (dim == 0) return;
  const int64_t rows_pad = round_up_nr(t.rows);
  for (int64_t i0 = 0; i0 < rows_pad; i0 += kNr) {
    Word* panel = dst + i0 * k2;
    const int64_t n = t.rows - i0 < kNr ? t.rows - i0 : kNr;
    for (int64_t r = 0; r < kNr; ++r) {
      if (r >= n) {
        for (int64_t w = 0; w < k2; ++w) panel[w * kNr + r] = 0;
        continue;
      }
      const uint16_t* row = half_at(x, x.offset(t.b, t.begin + i0 + r, t.h, 0));
      for (int64_t w = 0; w < k2; ++w) panel[w * kNr + r] = row_pair(row, sd, dim, 2 * w);
    }
  }
}

void pack_pair_panels(const ConstView& x, TileRows t, uint32_t* dst) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t dim_pad = round_up_nr(dim), k2 = k_pairs(t.rows);
  for (int64_t w = 0; w < k2; ++w) {
    const uint16_t* r0 = half_at(x, x.offset(t.b, t.begin + 2 * w, t.h, 0));
    const bool odd_end = 2 * w + 1 >= t.rows;
    const uint16_t* r1 = odd_end ? nullptr : half_at(x, x.offset(t.b, t.begin + 2 * w + 1, t.h, 0));
    for (int64_t d0 = 0; d0 < dim_pad; d0 += kNr) {
      Word* out = dst + d0 * k2 + w * kNr;  // panel d0 / kNr, word row w
      int64_t c = 0;
      if (sd == 1) {
        for (; c + kLanes <= kNr && d0 + c + kLanes <= dim; c += kLanes) {
          const __m512i v = interleave16(r0 + d0 + c, odd_end ? nullptr : r1 + d0 + c);
          _mm512_storeu_si512(out + c, v);
        }
      }
      for (; c < kNr; ++c) {
        const int64_t d = d0 + c;
        if (d >= dim) {
          out[c] = 0;
        } else {
          out[c] = pair(r0[d * sd], odd_end ? uint16_t{0} : r1[d * sd]);
        }
      }
    }
  }
}

PairsA pairs_down_rows(const float* st, int64_t nk, int64_t n, int64_t ld, uint32_t* dst) {
  const int64_t k2 = k_pairs(nk);
  for (int64_t w = 0; w < k2; ++w) {
    const float* s0 = st + 2 * w * ld;
    const float* s1 = 2 * w + 1 < nk ? s0 + ld : nullptr;
    for (int64_t i = 0; i < n; i += kLanes) {
      // In place, both rows' columns i .. i + 15 are read before word row w (which lies at or
      // before row 2w) is written there (the intrinsics' loads and stores may alias).
      const __m512 p0 = _mm512_loadu_ps(s0 + i);
      const __m512 p1 = s1 != nullptr ? _mm512_loadu_ps(s1 + i) : _mm512_setzero_ps();
      const __m512i lo = widen_bits((__m256i)_mm512_cvtneps_pbh(p0));
      const __m512i hi = widen_bits((__m256i)_mm512_cvtneps_pbh(p1));
      _mm512_storeu_si512(dst + w * ld + i, join(lo, hi));
    }
  }
  return {dst, 1, ld};
}

PairsA pairs_along_rows(float* st, int64_t nk, int64_t n, int64_t ld) {
  auto* words = reinterpret_cast<uint32_t*>(st);
  for (int64_t j = 0; j < nk; ++j) {
    const float* row = st + j * ld;
    for (int64_t i = 0; i < n; i += 2 * kLanes) {
      // Columns i .. i + 31 become words i / 2 .. i / 2 + 15 of the same row: they are read
      // before those words (at or before column i + 15) are written.
      const __m512 lo = _mm512_loadu_ps(row + i);
      const __m512 hi = _mm512_loadu_ps(row + i + kLanes);
      // 32 bf16 in column order: lo's 16 in the low half, hi's in the high half.
      _mm512_storeu_si512(words + j * ld + i / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  return {words, ld, 1};
}

}  // namespace cpattn::detail::CPATTN_ISA_NS

#endif  // CPATTN_ISA_BF16_DOT
