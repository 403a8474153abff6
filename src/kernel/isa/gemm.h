// Register-blocked fp32 tile products C (+)= A * B for the attention kernels. B is pre-packed in
// kNr-column panels; A is read through two strides, so A and A^T (for dV, dK) use one code path.
#pragma once

#include <cstdint>
#include <utility>

#include "kernel/isa/simd.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// Micro-tile: kMr rows x kNr = 2 vectors of columns of C live in 2 * kMr registers while the k
/// loop runs; each k step loads 2 B vectors and broadcasts kMr A values. FMA pipes (2 on Zen 3/4/5
/// and recent Intel) with 4-cycle latency need >= 8 independent accumulators.
/// - generic (4 lanes, 16 xmm): 6 x 8, 12 accumulators + 2 B + 1 broadcast = 15 registers.
/// - avx2 (8 lanes, 16 ymm): 6 x 16, 12 + 2 + 1 = 15 registers; 8 loads per 12 FMAs fit 3 load
///   ports.
/// - avx512 (16 lanes, 32 zmm): 8 x 32, 16 + 2 + 1 = 19 registers (the broadcast may also fold
///   into the FMA as an embedded {1to16} operand). 16 accumulators cover twice the FMA latency;
///   kMr = 8 divides every kernel tile (64, 128, 192 rows), so no remainder kernel runs; larger
///   kMr (12, 14: 24-28 accumulators) measured no faster (docs/performance.md).
/// Each B panel (K x kNr floats, <= 32 KiB for K <= 256 on AVX-512) stays in L1 while all row
/// blocks of A stream past it. Every C element is one FMA chain over k in order, from 0 (or from
/// C), whatever kMr and kNr: products are bitwise equal across the FMA paths (avx2, avx512).
constexpr int64_t kMr = kLanes == 16 ? 8 : 6;
constexpr int64_t kNr = 2 * kLanes;

/// Rounds n up to a multiple of kNr (the padded column count of packed tiles).
inline int64_t round_up_nr(int64_t n) { return (n + kNr - 1) / kNr * kNr; }

/// Packed-B layout: panel p (p = 0 .. N/kNr - 1) holds B[k][kNr*p + c] at
/// b[p * R * kNr + k * kNr + c] for k < K, c < kNr, where R (>= K) is the rows each panel holds
/// in memory: K itself, or more when the product runs on rows [k0, k0 + K) of panels packed
/// with R rows (data then points at row k0 of panel 0). Columns past the real N are zero.
struct PackedB {
  const float* data;
  int64_t k;               ///< the K of the product: rows used from each panel
  int64_t panel_rows = 0;  ///< R, the rows between panels; 0 means K
  /// Floats from one panel to the next.
  int64_t panel_size() const { return (panel_rows > 0 ? panel_rows : k) * kNr; }
  /// Panel n0 / kNr (n0 a multiple of kNr), at the product's first row.
  const float* panel(int64_t n0) const { return data + n0 / kNr * panel_size(); }
};

/// A[m][k] = a[m * row_stride + k * k_stride]: row-major A has (ld, 1), A^T of a row-major
/// matrix has (1, ld).
struct AOperand {
  const float* data;
  int64_t row_stride;
  int64_t k_stride;
};

/// C[m][n] = (accumulate ? C[m][n] * r_m : 0) + sum_{k < K} A[m][k] * B[k][n], for m < M and
/// n < N, where N is a multiple of kNr and K = b.k, r_m = row_scale[m] (1 when row_scale is null;
/// the forward's online-softmax rescale of O, folded into the product's load of C). C is
/// row-major with leading dimension ldc.
void gemm_tile(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc, bool accumulate,
               const float* row_scale = nullptr);

/// The loop nest around a register micro-kernel, shared by the fp32 product (gemm.cpp) and the
/// bf16 pair product (bf16_dot.cpp): column panels of kNr, row blocks of kMr, and the last
/// m % kMr rows through Micro<rows>. Micro<MR, kAccumulate>::run(k, a, row_stride, k_stride,
/// panel, c, ldc, row_scale) computes C[0:MR, 0:kNr] (+)= A[0:MR, 0:k] * panel, C's rows first
/// scaled by row_scale[0:MR] when accumulating and row_scale is not null (load_c below); A and B
/// are AOperand / PackedB or their pair twins (fields data, row_stride, k_stride; k and
/// panel(n0), the first row of the panel holding column n0).
template <template <int, bool> class Micro, bool kAccumulate, class A, class B>
void tile_loops(int64_t m, int64_t n, const A& a, const B& b, float* c, int64_t ldc,
                const float* row_scale) {
  const auto scale_at = [&](int64_t m0) { return row_scale == nullptr ? nullptr : row_scale + m0; };
  const auto tail = [&]<int... R>(int64_t rows, int64_t m0, const auto* panel, float* c_col,
                                  std::integer_sequence<int, R...>) {
    ((rows == R + 1
          ? Micro<R + 1, kAccumulate>::run(b.k, a.data + m0 * a.row_stride, a.row_stride,
                                           a.k_stride, panel, c_col + m0 * ldc, ldc, scale_at(m0))
          : void()),
     ...);
  };
  for (int64_t n0 = 0; n0 < n; n0 += kNr) {
    const auto* panel = b.panel(n0);
    float* c_col = c + n0;
    int64_t m0 = 0;
    for (; m0 + kMr <= m; m0 += kMr) {
      Micro<kMr, kAccumulate>::run(b.k, a.data + m0 * a.row_stride, a.row_stride, a.k_stride, panel,
                                   c_col + m0 * ldc, ldc, scale_at(m0));
    }
    if (m0 < m) tail(m - m0, m0, panel, c_col, std::make_integer_sequence<int, kMr - 1>{});
  }
}

/// The start of a micro-kernel's MR x kNr accumulators lo (columns 0 .. kLanes - 1) and hi (the
/// next kLanes): 0, or C's rows, each times row_scale[m] when row_scale is not null.
template <int MR, bool kAccumulate, class V, class Load>
inline void load_c(const float* c, int64_t ldc, const float* row_scale, V (&lo)[MR], V (&hi)[MR],
                   Load load_row) {
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
    lo[m] = kAccumulate ? load_row(c + m * ldc) : V{};
    hi[m] = kAccumulate ? load_row(c + m * ldc + kLanes) : V{};
  }
  if (!kAccumulate || row_scale == nullptr) return;
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
    const VF r = splat(row_scale[m]);
    lo[m] = lo[m] * r;
    hi[m] = hi[m] * r;
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
