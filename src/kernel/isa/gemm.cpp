// The micro-kernel behind gemm_tile (gemm.h): a kMr x kNr block of C in registers, one rank-1
// update per k step.
#include "kernel/isa/gemm.h"

#include <utility>

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

// C[0:MR, 0:kNr] (+)= A[0:MR, 0:K] * panel[0:K, 0:kNr]. MR < kMr handles the last row block.
template <int MR, bool kAccumulate>
struct MicroKernel {
  static void run(int64_t k_len, const float* a, int64_t rs, int64_t ks, const float* b, float* c,
                  int64_t ldc, const float* row_scale) {
    VF lo[MR], hi[MR];
    load_c<MR, kAccumulate>(c, ldc, row_scale, lo, hi, load);
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
};

}  // namespace

void gemm_tile(int64_t m, int64_t n, AOperand a, PackedB b, float* c, int64_t ldc, bool accumulate,
               const float* row_scale) {
  if (accumulate) {
    tile_loops<MicroKernel, true>(m, n, a, b, c, ldc, row_scale);
  } else {
    tile_loops<MicroKernel, false>(m, n, a, b, c, ldc, nullptr);
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
