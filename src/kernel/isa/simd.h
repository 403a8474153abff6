// The SIMD layer of the kernel's per-ISA code. Everything under src/kernel/isa/ is compiled once
// per row of the ISA table (CPATTN_ISA_TABLE in cpattn/isa.h; cmake/isa.cmake), each copy with its
// row's compiler flags and in its own namespace cpattn::detail::<isa>, so no inline function or
// template instance of one copy can stand in for another's at link time. The lane count is the one
// parameter that differs: Lanes<W> (GCC/Clang vector extensions) serves 4, 8 and 16 fp32 lanes
// from one source. CPATTN_ISA_BF16_DOT is 1 in a copy compiled with the avx512bf16 feature only:
// its bf16 calls run the products of bf16_dot.h; everything else in it is the avx512 copy's code.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX512BF16__)
#define CPATTN_ISA_BF16_DOT 1
#else
#define CPATTN_ISA_BF16_DOT 0
#endif

#if !defined(CPATTN_ISA_NS) || !defined(CPATTN_ISA_LANES)
#error "src/kernel/isa/ is compiled once per ISA with CPATTN_ISA_NS and CPATTN_ISA_LANES defined"
#endif

namespace cpattn::detail::CPATTN_ISA_NS {

/// W fp32 lanes: one register of the ISA (xmm, ymm, zmm for W = 4, 8, 16).
template <int W>
struct Lanes {
  static constexpr int kLanes = W;
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
  typedef uint32_t U __attribute__((vector_size(4 * W)));
  /// For loads/stores at any float address (packed tiles are 64-byte aligned, rows of odd-sized
  /// tiles need not be).
  typedef float Fu __attribute__((vector_size(4 * W), aligned(4)));
  typedef uint32_t Uu __attribute__((vector_size(4 * W), aligned(4)));
};

/// This copy's vectors: CPATTN_ISA_LANES lanes (4 generic, 8 AVX2, 16 AVX-512).
using Vec = Lanes<CPATTN_ISA_LANES>;
using VF = Vec::F;
using VI = Vec::I;
using VU = Vec::U;
constexpr int kLanes = Vec::kLanes;

inline VF load(const float* p) { return *reinterpret_cast<const Vec::Fu*>(p); }
inline void store(float* p, VF x) { *reinterpret_cast<Vec::Fu*>(p) = x; }
inline VU load_u32(const uint32_t* p) { return *reinterpret_cast<const Vec::Uu*>(p); }

template <int... L>
inline VF splat_lanes(float x, std::integer_sequence<int, L...>) {
  return VF{((void)L, x)...};
}
/// All lanes = x. Spelled out lane by lane: `VF{} + x` would be a real add (0 + -0 is +0, so the
/// compiler may not drop it) in front of every broadcast of the micro-kernel.
inline VF splat(float x) { return splat_lanes(x, std::make_integer_sequence<int, kLanes>{}); }

/// x as the rounded value it is: under -ffp-contract=fast the compiler may otherwise fuse the
/// multiply that made x with an add that uses it into one FMA, whose unrounded product differs
/// from the x another loop computed and stored (the backward recomputes the forward's scores:
/// P = exp(s - lse) of a row's dominant key is exactly 1 only when its s has the forward's bits).
inline VF rounded(VF x) {
  asm("" : "+v"(x));
  return x;
}

/// a > b ? a : b and a < b ? a : b for each lane: b where either is NaN or both are zeros. That is
/// what (v)maxps / (v)minps compute, but GCC lowers the vector select to a compare and a blend, so
/// the SIMD copies name the instruction (one operation instead of two; AVX-512 takes the maskz form
/// with every lane on, as GCC 12 warns of the plain one's undefined pass-through). The one
/// difference: with denormals-are-zero on (torch.set_flush_denormal), the instruction returns a
/// denormal operand as the zero it reads as, the select its bits.
inline VF vmax(VF a, VF b) {
#if CPATTN_ISA_LANES == 16 && defined(__AVX512F__)
  return __builtin_bit_cast(VF, _mm512_maskz_max_ps(0xFFFF, __builtin_bit_cast(__m512, a),
                                                    __builtin_bit_cast(__m512, b)));
#elif CPATTN_ISA_LANES == 8 && defined(__AVX2__)
  return __builtin_bit_cast(
      VF, _mm256_max_ps(__builtin_bit_cast(__m256, a), __builtin_bit_cast(__m256, b)));
#else
  return a > b ? a : b;
#endif
}
inline VF vmin(VF a, VF b) {
#if CPATTN_ISA_LANES == 16 && defined(__AVX512F__)
  return __builtin_bit_cast(VF, _mm512_maskz_min_ps(0xFFFF, __builtin_bit_cast(__m512, a),
                                                    __builtin_bit_cast(__m512, b)));
#elif CPATTN_ISA_LANES == 8 && defined(__AVX2__)
  return __builtin_bit_cast(
      VF, _mm256_min_ps(__builtin_bit_cast(__m256, a), __builtin_bit_cast(__m256, b)));
#else
  return a < b ? a : b;
#endif
}

/// Bit casts between the float and int lanes.
inline VI as_int(VF x) {
  VI i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline VF as_float(VI i) {
  VF x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}

/// hi, lo = the high and low words of every lane's 64-bit product a * m (Philox's multiply). The
/// one ISA-specific helper: vector extensions have no widening multiply, so AVX2/AVX-512 take
/// the even and odd lanes' 32 x 32 -> 64 products (vpmuludq) and interleave their high words.
inline void mul_hi_lo(VU a, uint32_t m, VU& hi, VU& lo) {
  lo = a * m;
#if (CPATTN_ISA_LANES == 16 && defined(__AVX512F__)) || (CPATTN_ISA_LANES == 8 && defined(__AVX2__))
  typedef uint64_t U64 __attribute__((vector_size(4 * kLanes)));
#if CPATTN_ISA_LANES == 16
  // The maskz form: GCC 12's plain one warns of its undefined pass-through operand.
  const auto mul_even = [](U64 x, uint32_t y) {
    return __builtin_bit_cast(U64, _mm512_maskz_mul_epu32(0xFF, __builtin_bit_cast(__m512i, x),
                                                          _mm512_set1_epi32(static_cast<int>(y))));
  };
#else
  const auto mul_even = [](U64 x, uint32_t y) {
    return __builtin_bit_cast(U64, _mm256_mul_epu32(__builtin_bit_cast(__m256i, x),
                                                    _mm256_set1_epi32(static_cast<int>(y))));
  };
#endif
  const U64 a64 = __builtin_bit_cast(U64, a);
  const U64 even = mul_even(a64, m) >> 32;  // high words of lanes 0, 2, ... in the low halves
  const U64 odd = mul_even(a64 >> 32, m) & 0xFFFFFFFF00000000ull;  // lanes 1, 3, ... in place
  hi = __builtin_bit_cast(VU, even | odd);
#else
  for (int l = 0; l < kLanes; ++l) {
    hi[l] = static_cast<uint32_t>((static_cast<uint64_t>(a[l]) * m) >> 32);
  }
#endif
}

/// Adding kRoundMagic = 1.5 * 2^23 to a float of magnitude below 2^22 rounds it to the nearest
/// integer n in the low mantissa bits (t's bits are 0x4B400000 + n; no float->int conversion on
/// the critical path), and t - kRoundMagic is n as a float.
constexpr float kRoundMagic = 12582912.0f;

/// The exps' last step: p 2^n, with n taken from t = x' + kRoundMagic (above) and added to p's
/// exponent field, 0 in the lanes `keep` clears (flushed), and `in` itself in its NaN lanes (a NaN
/// score must poison its row like any softmax would; the callers' clamps and `keep` would
/// otherwise turn it into 0, i.e. a silently masked key).
inline VF times_pow2_n(VF p, VF t, VI keep, VF in) {
  const VI n_exp = (as_int(t) - 0x4B400000) << 23;
  const VF out = as_float((as_int(p) + n_exp) & keep);
  return in == in ? out : in;
}

/// The exps' first step: in = x; keep = the lanes with x >= lo (false for NaN), which the last
/// step (times_pow2_n) flushes to 0 otherwise; x clamped from below at lo, which keeps p 2^n's
/// exponent normal in the flushed lanes.
inline void flush_below(float lo, VF& x, VF& in, VI& keep) {
  in = x;
  keep = x >= splat(lo);
  x = vmax(x, splat(lo));
}

/// p[g] = c[0] x[g]^(N-1) + c[1] x[g]^(N-2) + ... + c[N-1] by Horner's rule (one multiply-add a
/// coefficient), each step run on all G vectors before the next (the exps' polynomials).
template <int N, int G>
inline void horner_v(const float (&c)[N], const VF (&x)[G], VF (&p)[G]) {
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) p[g] = splat(c[0]) * x[g] + c[1];
#pragma GCC unroll 8
  for (int k = 2; k < N; ++k) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) p[g] = p[g] * x[g] + c[k];
  }
}

/// e^x for each lane, within 1.05 ulps over [-86, 88] (Cephes expf: x = n ln 2 + r with
/// n = round(x log2 e) and r reduced in two steps (Cody-Waite, ln 2 = C1 + C2 with C1 exact in 9
/// bits) so |r| <= ln2/2 carries no rounding from the reduction; degree-7 polynomial for e^r; 2^n
/// added to the exponent bits). Lanes with x < -86 (including -inf) give exactly 0, so masked
/// scores cost no branch (the flushed values are below e^-86 ~ 1e-37, invisible next to the row
/// maximum's e^0). NaN lanes return NaN and x > 88 gives +inf. Every operation is lane-wise, so
/// each lane's result does not depend on W (with FMA contraction, a * b + c is one rounding on
/// AVX2/AVX-512 and two on the generic path). ExpInputs::kNonPositive promises x <= 0 (or -inf,
/// or NaN) in every lane, as the backward's softmax passes (s - lse, clamped at 0): the upper
/// clamp and the +inf lanes, which cannot apply there, are skipped (the same bits as kAny for
/// those inputs, 3 of 23 vector operations fewer per call).
enum class ExpInputs { kAny, kNonPositive };
/// x[g] = e^x[g] for G vectors at once, each step of the algorithm run on all G before the next:
/// one exp is a chain of about 15 dependent operations, and a loop of single exps keeps few such
/// chains in flight (Zen 2's floating-point scheduler holds 36 operations). The same bits as G
/// calls of exp_v(VF) below, which is this with G = 1.
template <ExpInputs kInputs = ExpInputs::kAny, int G>
inline void exp_v(VF (&x)[G]) {
  VF in[G], t[G], p[G];
  VI keep[G];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    flush_below(-86.0f, x[g], in[g], keep[g]);
    // n <= 127 for large lanes, so the int32 exponent addition cannot overflow.
    if constexpr (kInputs == ExpInputs::kAny) x[g] = vmin(x[g], splat(88.0f));
  }
  // n = round(x log2 e) (kRoundMagic), then r = x - n ln 2 in two steps.
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) t[g] = x[g] * 1.44269504088896341f + kRoundMagic;
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    const VF n = t[g] - kRoundMagic;
    x[g] = x[g] - n * 0.693359375f - n * -2.12194440e-4f;  // x holds r from here
  }
  constexpr float kPoly[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                             4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
  horner_v(kPoly, x, p);
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) p[g] = p[g] * (x[g] * x[g]) + x[g] + 1.0f;
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    VF out = times_pow2_n(p[g], t[g], keep[g], in[g]);
    if constexpr (kInputs == ExpInputs::kAny) {
      out = in[g] > splat(88.0f) ? splat(__builtin_inff()) : out;  // NaN compares false
    }
    x[g] = out;
  }
}
template <ExpInputs kInputs = ExpInputs::kAny>
inline VF exp_v(VF x) {
  VF one[1] = {x};
  exp_v<kInputs>(one);
  return one[0];
}

/// 2^x for each lane of G vectors at once, for x <= 0, -inf or NaN only: the forward's online
/// softmax, which takes e^(s - m) as 2^((s - m) log2 e) (isa/forward.cpp). x = n + r with
/// n = round(x) (kRoundMagic) and |r| <= 1/2 exact (no Cody-Waite step); 2^r = 1 + r P(r), P of
/// degree 5 (the minimax coefficients of Cephes' exp2f, Moshier 1992); n added to the exponent
/// bits. Accurate within the bound tests/kernel/exp_test.cpp states, over [-124, 0]; lanes below
/// -124 (including -inf) give exactly 0 (2^-124 ~ 4.7e-38, as exp_v's e^-86), NaN lanes return
/// NaN. 16 vector operations per exp against exp_v<kNonPositive>'s 20 (with the multiply by
/// log2 e, 17); like exp_v, lane-wise and the same bits for any G. The forward runs 8 at a time
/// (interleaved exps: 1.3x faster than single ones on Zen 2, docs/performance.md).
template <int G>
inline void exp2_v(VF (&x)[G]) {
  VF in[G], t[G], p[G];
  VI keep[G];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    flush_below(-124.0f, x[g], in[g], keep[g]);
    t[g] = x[g] + kRoundMagic;
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) x[g] = x[g] - (t[g] - kRoundMagic);  // r, exact
  constexpr float kPoly[] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                             5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f};
  horner_v(kPoly, x, p);
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) x[g] = times_pow2_n(p[g] * x[g] + 1.0f, t[g], keep[g], in[g]);
}
inline VF exp2_v(VF x) {
  VF one[1] = {x};
  exp2_v(one);
  return one[0];
}

/// |x| for each lane (the sign bit cleared; NaN stays NaN).
inline VF abs_v(VF x) { return as_float(as_int(x) & 0x7FFFFFFF); }

/// scale * tanh(2 h) for each lane, scale > 0 (the softcap; tanh_v is tanh itself), for logit
/// soft-capping (docs/design.md section 1) in 6 FMAs, 6 other operations and one division,
/// since the forward pays it once per score (about a 256-FMA share of the products at D = 128):
/// u = tanh(h) as c P(c^2) / Q(c^2), c = h clamped to [-4.5, 4.5] (the caller folds the half of
/// x = 2h into its own multiply), a [7/6] rational
/// minimax approximation on [0, 4.5] fitted for this kernel (Lawson's iteration on the relative
/// error; its own error 0.38 ulp), then the double angle tanh 2h = 2u / (1 + u^2), taken in one
/// division as (2 scale) cP Q / (Q^2 + (cP)^2), the scale folded into the numerator. Near +-1,
/// where capped logits saturate, the double angle damps u's rounding by 1 - u^2; the fp32
/// evaluation's rounding shows at small |x|, in ulps of a small result
/// (tests/kernel/tanh_test.cpp states both bounds for scale 1). From |h| = 4.5 on the result is
/// the value at 9, within an ulp of +-scale and never beyond; odd by construction, the sign of
/// zero kept; NaN stays NaN. Lane-wise, so the same bits for any lane count.
inline VF scaled_tanh_of_double_v(VF h, VF scale) {
  // The clamps keep NaN: (4.5 < h ? 4.5 : h) is h when h is NaN (vmin's order would give 4.5).
  const VF hi = splat(4.5f), lo = splat(-4.5f);
  const VF c0 = hi < h ? hi : h;
  const VF c = lo > c0 ? lo : c0;
  const VF y = c * c;
  VF p = splat(5.497644452e-06f);
  p = p * y + 2.557787811e-03f;
  p = p * y + 1.259640306e-01f;
  p = p * y + 1.0f;
  VF q = splat(1.750917727e-04f);
  q = q * y + 2.232394554e-02f;
  q = q * y + 4.592971206e-01f;
  q = q * y + 1.0f;
  const VF n = c * p;  // tanh(x / 2) = n / q
  const VF t = n * (scale + scale) * q / (q * q + n * n);
#if !defined(__FMA__)
  // 2nq <= q^2 + n^2, but without fused multiply-adds (the generic copy) near +-1 it may round
  // above; the FMA copies never do (tests/kernel/tanh_test.cpp checks every float from 4 on).
  // NaN kept, as above.
  const VF minus_scale = -scale;
  const VF t0 = scale < t ? scale : t;
  return minus_scale > t0 ? minus_scale : t0;
#else
  return t;
#endif
}

/// tanh(x) for each lane: scaled_tanh_of_double_v of x / 2 with scale 1.
inline VF tanh_v(VF x) { return scaled_tanh_of_double_v(x * 0.5f, splat(1.0f)); }

}  // namespace cpattn::detail::CPATTN_ISA_NS
