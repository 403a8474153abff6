// Register-blocked fp32 tile products C (+)= A * B for the attention kernels. B is pre-packed in
// 16-column panels; A is read through two strides, so A and A^T (for dV, dK) use one code path.
#pragma once

#include <cstdint>

namespace cpattn::detail {

/// Micro-tile: kMr rows x kNr columns of C live in 12 AVX registers while the k loop runs.
/// Register budget (16 ymm on AVX2): 12 accumulators + 2 B vectors + 1 broadcast A = 15. Zen 3
/// issues 2 FMAs per cycle with 4-cycle latency, so >= 8 independent accumulators keep both
/// pipes busy; 12 leaves slack for the 8 loads per k step (2 B vectors + 6 broadcasts, 3 load
/// ports). Each B panel (K x 16 floats, <= 16 KiB for K <= 256) stays in L1 while all row blocks
/// of A stream past it.
constexpr int64_t kMr = 6;
constexpr int64_t kNr = 16;

/// Rounds n up to a multiple of kNr (the padded column count of packed tiles).
inline int64_t round_up_nr(int64_t n) { return (n + kNr - 1) / kNr * kNr; }

/// Packed-B layout: panel p (p = 0 .. N/kNr - 1) holds B[k][kNr*p + c] at
/// b[p * K * kNr + k * kNr + c] for k < K, c < kNr; columns past the real N are zero.
struct PackedB {
  const float* data;
  int64_t k;  ///< rows per panel (the K of the product)
};

/// A[m][k] = a[m * row_stride + k * k_stride]: row-major A has (ld, 1), A^T of a row-major
/// matrix has (1, ld).
struct AOperand {
  const float* data;
  int64_t row_stride;
  int64_t k_stride;
};

/// C[m][n] = (accumulate ? C[m][n] : 0) + sum_{k < K} A[m][k] * B[k][n], for m < M and n < N,
/// where N is a multiple of kNr and K = b.k. C is row-major with leading dimension ldc.
void gemm_tile(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc, bool accumulate);

}  // namespace cpattn::detail
