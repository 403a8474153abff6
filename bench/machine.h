// What a benchmark ran on, printed with every table (docs/performance.md): the CPU model and its
// SIMD flags, the kernel's ISA copies (available, detected, and the one kAuto resolves to), and
// the FMA throughput peak of each ISA measured by a tiny loop in the same run.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPATTN_BENCH_X86 1
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpattn/isa.h"

namespace cpattn::bench {

/// "model name" and the SIMD flags of the first CPU in /proc/cpuinfo.
inline std::string cpu_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line) && (model.empty() || flags.empty())) {
    const auto value = [&] { return line.substr(line.find(':') + 2); };
    if (model.empty() && line.rfind("model name", 0) == 0) model = value();
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = value();
  }
  std::string simd;
  std::istringstream words(flags);
  for (std::string w; words >> w;) {
    if (w == "sse2" || w == "avx" || w == "avx2" || w == "fma" || w.rfind("avx512", 0) == 0) {
      simd += (simd.empty() ? "" : " ") + w;
    }
  }
  return model + "; SIMD flags: " + simd;
}

/// "kernel ISAs: generic avx2 avx512 (detected avx512, this run: avx512)", and on AVX512_BF16
/// CPUs how vdpbf16ps was rated ("; vdpbf16ps: Intel family 0x6 model 0xcf (...): half rate").
inline std::string isa_line() {
  std::string s = "kernel ISAs:";
  for (Isa isa : available_isas()) s += std::string(" ") + isa_name(isa);
  s += " (detected " + std::string(isa_name(detected_isa())) +
       ", this run: " + isa_name(resolve_isa(Isa::kAuto)) + ")";
  if (detected_isa() == Isa::kAvx512Bf16) s += "; vdpbf16ps: " + cpattn::bf16_dot_rate().source;
  return s;
}

#ifdef CPATTN_BENCH_X86
// One thread's share of the FMA loop: kAcc independent accumulators (more than the pipes x
// latency any current core needs), n iterations; returns flops.
__attribute__((target("avx512f"))) inline double fma_loop_avx512(long n) {
  constexpr int kAcc = 24;
  __m512 a[kAcc];
  for (int i = 0; i < kAcc; ++i) a[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 16 * kAcc * static_cast<double>(n);
}
// The bf16 twin: kAcc chains of vdpbf16ps (2 multiply-adds per fp32 lane and instruction).
__attribute__((target("avx512f,avx512bf16"))) inline double dpbf16_loop_avx512(long n) {
  constexpr int kAcc = 24;
  __m512 a[kAcc];
  for (int i = 0; i < kAcc; ++i) a[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3F7F3F7F);  // bf16 pairs (0.996, 0.996)
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 24
    for (int i = 0; i < kAcc; ++i) a[i] = _mm512_dpbf16_ps(a[i], b, b);
  }
  __m512 s = a[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 2 * 16 * kAcc * static_cast<double>(n);
}
__attribute__((target("avx2,fma"))) inline double fma_loop_avx2(long n) {
  constexpr int kAcc = 12;
  __m256 a[kAcc];
  for (int i = 0; i < kAcc; ++i) a[i] = _mm256_set1_ps(1e-3f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < kAcc; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 8 * kAcc * static_cast<double>(n);
}
// The generic path has no FMA: a multiply and an add per lane (SSE2, 4 lanes).
inline double mul_add_loop_sse2(long n) {
  constexpr int kAcc = 12;
  __m128 a[kAcc];
  for (int i = 0; i < kAcc; ++i) a[i] = _mm_set1_ps(1e-3f * static_cast<float>(i));
  const __m128 b = _mm_set1_ps(0.999f), c = _mm_set1_ps(1e-4f);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) a[i] = _mm_add_ps(_mm_mul_ps(a[i], b), c);
  }
  __m128 s = a[0];
  for (int i = 1; i < kAcc; ++i) s = _mm_add_ps(s, a[i]);
  float out[4];
  _mm_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 4 * kAcc * static_cast<double>(n);
}

#endif  // CPATTN_BENCH_X86

/// Peak fp32 GFLOPS of `isa` on `threads` threads: each runs the loop above for ~0.3 s
/// (a multiply-add loop of 2 flops per lane; FMA for avx2/avx512; for avx512bf16 the
/// vdpbf16ps loop, 4 flops per fp32 lane: the bf16 dot-product peak).
inline double fma_peak_gflops(Isa isa, int threads) {
  constexpr long kIterations = 40'000'000;
  std::vector<double> flops(static_cast<size_t>(threads));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      double& f = flops[static_cast<size_t>(t)];
#ifdef CPATTN_BENCH_X86
      if (isa == Isa::kAvx512Bf16) f = dpbf16_loop_avx512(kIterations);
      if (isa == Isa::kAvx512) f = fma_loop_avx512(kIterations);
      if (isa == Isa::kAvx2) f = fma_loop_avx2(kIterations);
      if (isa == Isa::kGeneric) f = mul_add_loop_sse2(kIterations);
#else
      f = 0;  // no loop for this architecture
#endif
    });
  }
  for (std::thread& t : pool) t.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double total = 0;
  for (double f : flops) total += f;
  return total > 0 ? total / secs / 1e9 : NAN;
}

}  // namespace cpattn::bench
