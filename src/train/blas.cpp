// oneDNN's sgemm and its thread count (blas.h). oneDNN's Debian build runs on OpenMP, whose
// thread count is a per-thread setting: every rank thread applies the process's blas_threads()
// to itself before its first product and whenever it changed.
#include "train/blas.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>

#include "cpattn/error.h"
#include "cpattn/isa.h"

namespace cpattn::train {

namespace {

// The process's BLAS thread count: a setting of the process, like OpenBLAS's own, not state of
// any call.
std::atomic<int> g_threads{1};

void apply_threads() {
  thread_local int applied = 0;  // this thread's OpenMP setting, as last applied here
  const int want = g_threads.load(std::memory_order_relaxed);
  if (applied != want) {
    omp_set_num_threads(want);
    applied = want;
  }
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  CPATTN_CHECK(m >= 0 && n >= 0 && k >= 0, ErrorCode::kInvalidArgument,
               "sgemm: sizes must be >= 0, got m = ", m, ", n = ", n, ", k = ", k);
  CPATTN_CHECK(lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n) && ldc >= n,
               ErrorCode::kInvalidArgument, "sgemm: row strides shorter than a row (lda = ", lda,
               ", ldb = ", ldb, ", ldc = ", ldc, ")");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta C: oneDNN would leave C as it is (and beta = 0 must clear NaNs)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  apply_threads();
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda > 0 ? lda : 1, b,
                 ldb > 0 ? ldb : 1, beta, c, ldc > 0 ? ldc : 1);
  CPATTN_CHECK(status == dnnl_success, ErrorCode::kInternal, "oneDNN sgemm failed (status ",
               static_cast<int>(status), ") for m = ", m, ", n = ", n, ", k = ", k);
}

void set_blas_threads(int threads) {
  CPATTN_CHECK(threads >= 1, ErrorCode::kInvalidArgument, "BLAS threads must be >= 1, got ",
               threads);
  g_threads.store(threads, std::memory_order_relaxed);
}

int blas_threads() { return g_threads.load(std::memory_order_relaxed); }

std::string blas_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other (dnnl_cpu_isa " + std::to_string(dnnl_get_effective_cpu_isa()) + ")";
  }
}

bool blas_isa_matches_cpu() {
  // dnnl_cpu_isa_t values are bit sets: an ISA's bits include those of every ISA it extends.
  const unsigned have = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  unsigned need = 0;
  switch (detected_isa()) {
    case Isa::kAvx512:
    case Isa::kAvx512Bf16:
      need = dnnl_cpu_isa_avx512_core;
      break;
    case Isa::kAvx2:
      need = dnnl_cpu_isa_avx2;
      break;
    case Isa::kGeneric:
    case Isa::kAuto:
      need = 0;
      break;
  }
  return (have & need) == need;
}

std::string blas_summary() {
  const dnnl_version_t* v = dnnl_version();
  const int threads = blas_threads();
  return detail::str_cat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " sgemm on ",
                         blas_isa(), ", ", threads, threads == 1 ? " thread" : " threads");
}

}  // namespace cpattn::train
