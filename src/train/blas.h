// The training job's matrix products: oneDNN's sgemm, which picks its kernel (a JIT for SSE4.1,
// AVX2, AVX-512 or AMX) from the CPU at run time. Debian's OpenBLAS 0.3.21, the earlier choice,
// does not know every current CPU and then runs its SSE3 (Prescott) kernel without a word, several
// times slower (the figures: docs/performance.md, "Training job").
// This file and blas.cpp are the only ones that call oneDNN.
#pragma once

#include <cstdint>
#include <string>

namespace cpattn::train {

/// C = alpha * op(A) * op(B) + beta * C for row-major matrices: op(A) is [m, k] (A is [k, m]
/// when trans_a), op(B) is [k, n] (B is [n, k] when trans_b), C is [m, n]; lda, ldb, ldc are
/// the row strides in floats. Runs on the calling thread with blas_threads() threads. Throws
/// Error(kInvalidArgument) for negative sizes or strides shorter than a row, Error(kInternal)
/// when oneDNN reports a failure.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// Sets the threads every later sgemm uses, on every thread of the process (default 1: the
/// training job's parallelism is its ranks, one thread each, and BLAS threads inside them
/// would oversubscribe the cores). Throws Error(kInvalidArgument) when threads < 1.
void set_blas_threads(int threads);
/// The threads sgemm uses.
int blas_threads();

/// oneDNN's name of the instruction set its kernels run on this CPU
/// (dnnl_get_effective_cpu_isa): "avx512_core_bf16", "avx2", "sse41", ...
std::string blas_isa();
/// True when blas_isa() covers every instruction set of the kernel's widest path on this CPU
/// (cpattn/isa.h detected_isa: AVX-512 F/BW/VL/DQ -> avx512_core, AVX2 -> avx2): the products
/// run no slower kernel than the CPU allows.
bool blas_isa_matches_cpu();
/// "oneDNN 2.6.3 sgemm on avx512_core_bf16, 1 thread": what cpattn train and --version print.
std::string blas_summary();

}  // namespace cpattn::train
