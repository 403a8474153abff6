// The micro-kernel behind gemm_tile (gemm.h): a 6 x 16 block of C in registers, one rank-1
// update per k step.
#include "kernel/gemm.h"

#include "kernel/simd.h"

namespace cpattn::detail {
namespace {

// C[0:MR, 0:16] (+)= A[0:MR, 0:K] * panel[0:K, 0:16]. MR < kMr handles the last row block.
template <int MR, bool kAccumulate>
void micro_kernel(int64_t k_len, const float* a, int64_t rs, int64_t ks, const float* b, float* c,
                  int64_t ldc) {
  V8 lo[MR], hi[MR];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    lo[m] = kAccumulate ? load8(c + m * ldc) : V8{};
    hi[m] = kAccumulate ? load8(c + m * ldc + 8) : V8{};
  }
  for (int64_t k = 0; k < k_len; ++k) {
    const V8 b0 = load8(b + k * kNr);
    const V8 b1 = load8(b + k * kNr + 8);
    const float* ak = a + k * ks;
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const V8 am = splat8(ak[m * rs]);
      lo[m] += am * b0;  // contracted to one FMA (-ffp-contract=fast)
      hi[m] += am * b1;
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    store8(c + m * ldc, lo[m]);
    store8(c + m * ldc + 8, hi[m]);
  }
}

template <bool kAccumulate>
void gemm_tile_impl(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc) {
  for (int64_t n0 = 0; n0 < n; n0 += kNr) {
    const float* panel = b.data + n0 * b.k;  // (n0 / kNr) panels of b.k * kNr floats
    float* c_col = c + n0;
    int64_t m0 = 0;
    for (; m0 + kMr <= m; m0 += kMr) {
      micro_kernel<kMr, kAccumulate>(b.k, a.data + m0 * a.row_stride, a.row_stride, a.k_stride,
                                     panel, c_col + m0 * ldc, ldc);
    }
    const float* a_rest = a.data + m0 * a.row_stride;
    float* c_rest = c_col + m0 * ldc;
    switch (m - m0) {
      case 1:
        micro_kernel<1, kAccumulate>(b.k, a_rest, a.row_stride, a.k_stride, panel, c_rest, ldc);
        break;
      case 2:
        micro_kernel<2, kAccumulate>(b.k, a_rest, a.row_stride, a.k_stride, panel, c_rest, ldc);
        break;
      case 3:
        micro_kernel<3, kAccumulate>(b.k, a_rest, a.row_stride, a.k_stride, panel, c_rest, ldc);
        break;
      case 4:
        micro_kernel<4, kAccumulate>(b.k, a_rest, a.row_stride, a.k_stride, panel, c_rest, ldc);
        break;
      case 5:
        micro_kernel<5, kAccumulate>(b.k, a_rest, a.row_stride, a.k_stride, panel, c_rest, ldc);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void gemm_tile(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc,
               bool accumulate) {
  if (accumulate) {
    gemm_tile_impl<true>(m, n, a, b, c, ldc);
  } else {
    gemm_tile_impl<false>(m, n, a, b, c, ldc);
  }
}

}  // namespace cpattn::detail
