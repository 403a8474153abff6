// Elementwise float math for the train/ ops' loops, written so the compiler vectorizes it, and
// the multi-versioning that gives those loops the CPU's widest vectors: train/ is compiled for
// baseline x86-64 (SSE2; src/CMakeLists.txt), so a loop marked CPATTN_TRAIN_VECTOR_CLONES is
// compiled three times (baseline, x86-64-v3 = AVX2 + FMA, x86-64-v4 = AVX-512) and the loader
// picks the copy for the CPU once (GCC function multi-versioning, an ifunc). The copies may
// round differently (FMA contraction), never differently within one process: the job's results
// are bitwise reproducible on one CPU type, not across types (as its oneDNN products already
// were).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

// CPATTN_TRAIN_ELEMENTWISE, before a loop over i whose output i depends only on inputs i, lets
// it vectorize when an output is the same array as an input (the ops' documented in-place use),
// which the compiler cannot rule out otherwise.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPATTN_TRAIN_VECTOR_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define CPATTN_TRAIN_ELEMENTWISE _Pragma("GCC ivdep")
#else
#define CPATTN_TRAIN_VECTOR_CLONES
#define CPATTN_TRAIN_ELEMENTWISE
#endif

namespace cpattn::train::detail {

/// e^x in float, inline and branch-free so loops calling it vectorize (libm's expf is a call per
/// element; its selects vectorize without AVX-512's masks because train/ is compiled with
/// -fno-trapping-math, src/CMakeLists.txt). Range reduction x = n ln2 + r, |r| <= ln2 / 2, with ln2
/// split in two parts (Cody & Waite), e^r by the degree-7 minimax polynomial of Cephes' expf
/// (Moshier 1984), then n added to the exponent bits. Within 1.5 ulp of e^x for x in [-87, 88]
/// (1.003 at worst over every 97th float there: tests/train/vector_math_test.cpp); x < -87 gives 0
/// (e^-87 is 1.6e-38, near the smallest normal float), x > 88 gives e^88 (1.65e38) rather than
/// +inf, NaN gives NaN.
inline float exp_vectorizable(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 to 9 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: t's low mantissa bits hold round(x log2 e)
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;  // in [-126, 127]
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = (p * r) * r + r + 1.0f;
  // n + 127 in [1, 254] (unsigned: a NaN's bits wrap harmlessly, the result is NaN anyway).
  const uint32_t biased = std::bit_cast<uint32_t>(t) - 0x4B400000u + 127u;
  const float scale = std::bit_cast<float>(biased << 23);
  return x < -87.0f ? 0.0f : e * scale;
}

/// sum_{i < n} term(i) in double as 8 partial sums (sum l of the terms i = l mod 8) added in
/// order at the end: a fixed order, so the same bits on every run, and one the compiler
/// vectorizes (a single running sum is a chain of dependent adds it may not reorder). `term`
/// returns the double term of index i.
template <typename Term>
inline double ordered_sum(size_t n, const Term& term) {
  constexpr size_t kParts = 8;
  double part[kParts] = {};
  size_t i = 0;
  for (; i + kParts <= n; i += kParts) {
    for (size_t l = 0; l < kParts; ++l) part[l] += term(i + l);
  }
  for (size_t l = 0; i + l < n; ++l) part[l] += term(i + l);
  double sum = 0.0;
  for (const double p : part) sum += p;
  return sum;
}

}  // namespace cpattn::train::detail
