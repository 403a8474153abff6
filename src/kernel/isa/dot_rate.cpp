// bf16_dot_vs_fma_rate (dot_rate.h). Each timed loop runs 12 independent accumulator chains, more
// than two pipes x the instructions' latency (4-6 cycles), so it measures throughput, not
// latency; the result registers are summed and returned so no loop can be dropped.
#include "kernel/isa/dot_rate.h"

#include <chrono>

#include "kernel/isa/simd.h"  // first: it defines CPATTN_ISA_BF16_DOT and includes immintrin.h

namespace cpattn::detail::CPATTN_ISA_NS {

#if CPATTN_ISA_BF16_DOT
namespace {

constexpr int kChains = 12;
constexpr int kSteps = 2048;  // x 12 instructions: ~25-50 microseconds a loop at 2-4 GHz

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times kSteps x kChains instructions of one kind; `sink` keeps their results alive.
template <typename Step>
double time_loop(Step step, float& sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1e-3f * static_cast<float>(c));
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < kSteps; ++s) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = step(acc[c]);
    __asm__ volatile(""
                     : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]),
                       "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]), "+v"(acc[8]), "+v"(acc[9]),
                       "+v"(acc[10]), "+v"(acc[11]));
  }
  const double t = seconds_since(t0);
  // Lane 0 of each chain (GCC 12's _mm512_reduce_add_ps warns of an undefined operand).
  for (int c = 0; c < kChains; ++c) sink += _mm512_cvtss_f32(acc[c]);
  return t;
}

}  // namespace

double bf16_dot_vs_fma_rate() {
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-6f);
  const __m512bh a = _mm512_cvtne2ps_pbh(x, x), b = _mm512_cvtne2ps_pbh(y, y);
  float sink = 0.0f;
  double fma = 1e30, dot = 1e30;
  for (int r = 0; r < 7; ++r) {  // alternated, so both see the same frequency and neighbours
    const double f = time_loop([&](__m512 c) { return _mm512_fmadd_ps(x, y, c); }, sink);
    const double d = time_loop([&](__m512 c) { return _mm512_dpbf16_ps(c, a, b); }, sink);
    fma = f < fma ? f : fma;
    dot = d < dot ? d : dot;
  }
  __asm__ volatile("" : : "x"(sink));
  return dot > 0.0 ? fma / dot : 0.0;
}
#else
double bf16_dot_vs_fma_rate() { return 0.0; }
#endif

}  // namespace cpattn::detail::CPATTN_ISA_NS
