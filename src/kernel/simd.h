// 8-lane fp32 vectors (GCC/Clang vector extensions: AVX2 registers with -march=native, split into
// SSE or scalar code elsewhere) and the vectorised exp the softmax runs on.
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

/// e^x for each lane, within ~1 ulp (Cephes expf: x = n ln 2 + r with n = round(x log2 e) and
/// r reduced in two steps (Cody-Waite, ln 2 = C1 + C2 with C1 exact in 9 bits) so |r| <= ln2/2
/// carries no rounding from the reduction; degree-7 polynomial for e^r; 2^n added to the
/// exponent bits). Lanes with x < -86 (including -inf) give exactly 0, so masked scores cost no
/// branch (the flushed values are below e^-86 ~ 1e-37, invisible next to the row maximum's
/// e^0). NaN lanes return NaN and x > 88 gives +inf (the forward softmax only passes x <= 0; the
/// backward's s - lse can exceed 0 by rounding, by a lot only for absurd logits or a wrong lse).
inline V8 exp_8(V8 x) {
  const V8 in = x;
  const V8i keep = x >= splat8(-86.0f);
  x = max8(x, splat8(-86.0f));  // keeps the exponent of p * 2^n normal for flushed lanes
  // ... and n <= 127 for large lanes, so the int32 exponent addition below cannot overflow.
  x = x < splat8(88.0f) ? x : splat8(88.0f);
  // Adding 1.5 * 2^23 rounds to the nearest integer in the low mantissa bits (no float->int
  // conversion on the critical path).
  const V8 magic = splat8(12582912.0f);
  const V8 t = x * 1.44269504088896341f + magic;
  const V8 n = t - magic;
  const V8 r = x - n * 0.693359375f - n * -2.12194440e-4f;
  V8 p = splat8(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  V8i bits;
  std::memcpy(&bits, &t, sizeof bits);
  // t's low mantissa bits hold 0x4B400000 + n; p * 2^n is p with n added to its exponent field.
  const V8i n_exp = (bits - 0x4B400000) << 23;
  V8i pbits;
  std::memcpy(&pbits, &p, sizeof pbits);
  pbits = (pbits + n_exp) & keep;
  V8 out;
  std::memcpy(&out, &pbits, sizeof out);
  // A NaN score (NaN or Inf in q/k) must poison its row like any softmax would; the clamp and
  // `keep` above would otherwise turn it into 0, i.e. a silently masked key.
  out = in > splat8(88.0f) ? splat8(__builtin_inff()) : out;
  return in == in ? out : in;
}

}  // namespace cpattn::detail
