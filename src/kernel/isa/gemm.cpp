// The micro-kernel behind gemm_tile (gemm.h): an MR x (NP kNr) block of C in registers, one rank-1
// update per k step.
#include "kernel/isa/gemm.h"

#include <utility>

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

// C[0:MR, 0:NP kNr] (+)= A[0:MR, 0:K] * panels 0 .. NP - 1 of B (each K x kNr, panel_size
// floats apart). The full row blocks run MR = kMr, NP = 1; the last m % kMr rows run several
// panels at once (tail_rows).
template <int MR, int NP, bool kAccumulate>
struct MicroKernel {
  static void run(int64_t k_len, const float* a, int64_t rs, int64_t ks, const float* b,
                  int64_t panel_size, float* c, int64_t ldc, const float* row_scale) {
    VF lo[NP][MR], hi[NP][MR];
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p) {
      load_c<MR, kAccumulate>(c + p * kNr, ldc, row_scale, lo[p], hi[p], load);
    }
    // Four k steps per trip amortise the loop's branch and bookkeeping (a 192 x 128 x 128
    // product 1.02-1.03x faster on Zen 2); each accumulator still takes the k steps in order.
#pragma GCC unroll 4
    for (int64_t k = 0; k < k_len; ++k) {
      const float* ak = a + k * ks;
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) {
        const VF b0 = load(b + p * panel_size + k * kNr);
        const VF b1 = load(b + p * panel_size + k * kNr + kLanes);
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
          const VF am = splat(ak[m * rs]);
          lo[p][m] += am * b0;  // contracted to one FMA (-ffp-contract=fast) where the ISA has FMA
          hi[p][m] += am * b1;
        }
      }
    }
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        store(c + p * kNr + m * ldc, lo[p][m]);
        store(c + p * kNr + m * ldc + kLanes, hi[p][m]);
      }
    }
  }
};

// tile_loops' interface: one panel per call.
template <int MR, bool kAccumulate>
struct OnePanel {
  static void run(int64_t k_len, const float* a, int64_t rs, int64_t ks, const float* b, float* c,
                  int64_t ldc, const float* row_scale) {
    MicroKernel<MR, 1, kAccumulate>::run(k_len, a, rs, ks, b, 0, c, ldc, row_scale);
  }
};

// The last MR (< kMr) rows of C over all n / kNr panels. One panel would give only 2 MR
// accumulator chains, too few to cover the FMA latency (AVX2's 2-row tail of a 128-row tile cost
// 5 % of the product's time); kMr / MR panels per call keep up to 2 kMr chains in flight, as a
// full row block has. Each C element is still one FMA chain over k in order.
template <int MR, bool kAccumulate>
void tail_rows(int64_t n, AOperand a, PackedB b, float* c, int64_t ldc, const float* row_scale) {
  constexpr int kPanels = kMr / MR;
  const auto run = [&]<int NP>(int64_t n0) {
    MicroKernel<MR, NP, kAccumulate>::run(b.k, a.data, a.row_stride, a.k_stride, b.panel(n0),
                                          b.panel_size(), c + n0, ldc, row_scale);
  };
  int64_t n0 = 0;
  for (; n0 + kPanels * kNr <= n; n0 += kPanels * kNr) run.template operator()<kPanels>(n0);
  const int64_t left = (n - n0) / kNr;  // 0 .. kPanels - 1 panels
  [&]<int... P>(std::integer_sequence<int, P...>) {
    ((left == P + 1 ? run.template operator()<P + 1>(n0) : void()), ...);
  }
  (std::make_integer_sequence<int, kPanels - 1>{});
}

template <bool kAccumulate>
void gemm_rows(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc,
               const float* row_scale) {
  const int64_t m_full = m / kMr * kMr;
  tile_loops<OnePanel, kAccumulate>(m_full, n, a, b, c, ldc, row_scale);
  if (m_full == m) return;
  const AOperand a_tail{a.data + m_full * a.row_stride, a.row_stride, a.k_stride};
  float* c_tail = c + m_full * ldc;
  const float* scale_tail = row_scale == nullptr ? nullptr : row_scale + m_full;
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((m - m_full == R + 1 ? tail_rows<R + 1, kAccumulate>(n, a_tail, b, c_tail, ldc, scale_tail)
                          : void()),
     ...);
  }
  (std::make_integer_sequence<int, kMr - 1>{});
}

}  // namespace

void gemm_tile(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc, bool accumulate,
               const float* row_scale) {
  if (accumulate) {
    gemm_rows<true>(m, n, a, b, c, ldc, row_scale);
  } else {
    gemm_rows<false>(m, n, a, b, c, ldc, nullptr);
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
