// The micro-kernel behind gemm_tile (gemm.h): a kMr x kNr block of C in registers, one rank-1
// update per k step.
#include "kernel/isa/gemm.h"

#include <utility>

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

// C[0:MR, 0:kNr] (+)= A[0:MR, 0:K] * panel[0:K, 0:kNr]. MR < kMr handles the last row block.
template <int MR, bool kAccumulate>
void micro_kernel(int64_t k_len, const float* a, int64_t rs, int64_t ks, const float* b, float* c,
                  int64_t ldc) {
  VF lo[MR], hi[MR];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
    lo[m] = kAccumulate ? load(c + m * ldc) : VF{};
    hi[m] = kAccumulate ? load(c + m * ldc + kLanes) : VF{};
  }
  for (int64_t k = 0; k < k_len; ++k) {
    const VF b0 = load(b + k * kNr);
    const VF b1 = load(b + k * kNr + kLanes);
    const float* ak = a + k * ks;
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const VF am = splat(ak[m * rs]);
      lo[m] += am * b0;  // contracted to one FMA (-ffp-contract=fast) where the ISA has FMA
      hi[m] += am * b1;
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
    store(c + m * ldc, lo[m]);
    store(c + m * ldc + kLanes, hi[m]);
  }
}

// The last rows - m0 < kMr rows of a column panel: micro_kernel<rows> for the one matching R + 1.
template <bool kAccumulate, int... R>
void micro_kernel_tail(int64_t rows, int64_t k_len, const float* a, int64_t rs, int64_t ks,
                       const float* b, float* c, int64_t ldc, std::integer_sequence<int, R...>) {
  ((rows == R + 1 ? micro_kernel<R + 1, kAccumulate>(k_len, a, rs, ks, b, c, ldc) : void()), ...);
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
    if (m0 < m) {
      micro_kernel_tail<kAccumulate>(m - m0, b.k, a.data + m0 * a.row_stride, a.row_stride,
                                     a.k_stride, panel, c_col + m0 * ldc, ldc,
                                     std::make_integer_sequence<int, kMr - 1>{});
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

}  // namespace cpattn::detail::CPATTN_ISA_NS
