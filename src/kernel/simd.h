// 8-lane fp32 vectors (GCC/Clang vector extensions: AVX2 registers with -march=native, split into
// SSE or scalar code elsewhere) and the vectorised exp2 the softmax runs on.
#pragma once

#include <cstdint>
#include <cstring>

namespace cpattn::detail {

/// Eight floats, one AVX register. The aligned(4) variant is used for loads/stores at any float
/// address (packed tiles are 64-byte aligned, but rows of odd-sized tiles need not be).
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef float V8u __attribute__((vector_size(32), aligned(4)));

constexpr int kLanes = 8;

inline V8 load8(const float* p) { return *reinterpret_cast<const V8u*>(p); }
inline void store8(float* p, V8 x) { *reinterpret_cast<V8u*>(p) = x; }
/// All lanes = x. Spelled out lane by lane: `V8{} + x` would be a real add (0 + -0 is +0, so the
/// compiler may not drop it) in front of every broadcast of the micro-kernel.
inline V8 splat8(float x) { return V8{x, x, x, x, x, x, x, x}; }

inline V8 max8(V8 a, V8 b) { return a > b ? a : b; }

inline float hmax8(V8 x) {
  float m = x[0];
  for (int i = 1; i < kLanes; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
inline float hsum8(V8 x) {
  // Pairwise so the compiler emits shuffles + adds instead of a serial chain.
  const float a = (x[0] + x[4]) + (x[2] + x[6]);
  const float b = (x[1] + x[5]) + (x[3] + x[7]);
  return a + b;
}

/// 2^x for each lane, relative error ~1.5e-7 (Cephes exp2f: round-to-nearest range reduction
/// x = n + f, |f| <= 1/2, degree-6 minimax polynomial for 2^f, 2^n built in the exponent bits).
/// Lanes with x < -125 (including -inf) give exactly 0, so masked scores cost no branch (the
/// flushed values are below 2^-125, invisible next to the row maximum's 2^0). x > 127 and NaN
/// give unspecified values; the softmax only passes x <= 0 after subtracting the row maximum.
inline V8 exp2_8(V8 x) {
  const V8i keep = x >= splat8(-125.0f);
  x = max8(x, splat8(-125.0f));  // keeps the exponent of p * 2^n normal for flushed lanes
  // Adding 1.5 * 2^23 rounds x to the nearest integer in the low mantissa bits (no float->int
  // conversion instruction on the critical path).
  const V8 magic = splat8(12582912.0f);
  const V8 t = x + magic;
  const V8 n = t - magic;
  const V8 f = x - n;
  V8 p = splat8(1.535336188319500e-4f);
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  V8i bits;
  std::memcpy(&bits, &t, sizeof bits);
  // The integer n sits in the low mantissa bits of t (which are 0x4B400000 + n); p * 2^n is
  // p with n added to its exponent field.
  const V8i n_exp = (bits - 0x4B400000) << 23;
  V8i pbits;
  std::memcpy(&pbits, &p, sizeof pbits);
  pbits = (pbits + n_exp) & keep;
  V8 r;
  std::memcpy(&r, &pbits, sizeof r);
  return r;
}

/// Scalar 2^x with the same polynomial (row tails and tests).
inline float exp2_1(float x) { return exp2_8(splat8(x))[0]; }

}  // namespace cpattn::detail
