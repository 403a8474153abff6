// The slow attention oracle for verification (tests and `cpattn verify`): naive forward and
// backward straight from docs/design.md sections 1 and 4, in double (and a plain fp32 twin).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "cpattn/kernel.h"
#include "cpattn/rng.h"

namespace cpattn::reference {

/// Sizes of one attention problem: q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk], v [B, Sk, Hkv, Dv].
struct Dims {
  int64_t B = 1, Sq = 0, Sk = 0, Hq = 1, Hkv = 1, Dqk = 0, Dv = 0;
};

/// One complete attention problem. Tensors are flat row-major [B, S, H, D] (BSHD) doubles;
/// docs are empty when the problem has a single document.
struct Problem {
  Dims dims;
  AttentionParams params;
  RngState rng;
  std::vector<int64_t> q_pos, k_pos, q_doc, k_doc;
  std::vector<double> q, k, v;  ///< [B, Sq, Hq, Dqk], [B, Sk, Hkv, Dqk], [B, Sk, Hkv, Dv]
  std::vector<double> dout;     ///< [B, Sq, Hq, Dv]; may be empty when no backward is wanted
  /// Double values of the two float parameters, for data computed in double (the golden
  /// vectors); unset = use params.softmax_scale (or 1 / sqrt(Dqk)) and params.dropout_p.
  std::optional<double> exact_scale, exact_dropout_p;
  /// The mask as a matrix, [Sq][Sk] row-major, nonzero = visible: when not empty it replaces
  /// params' mask (causal, windows, documents, slices), so a test can state a mask pixel by pixel.
  std::vector<uint8_t> dense_mask{};
};

/// Every tensor attention produces, flat BSHD doubles (lse [B, Hq, Sq], -inf for empty rows; the
/// sink logits' gradient dsink [Hq]). The gradients are empty when only the forward was computed;
/// dsink also when the problem has no sinks.
struct Outputs {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<double> dsink{};
};

/// Philox4x32-10 (Salmon et al., SC'11), written here a second time on purpose: the oracle must
/// not share code with src/rng, so a bug there cannot hide in both.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// The dropout contract's uint32 lane for element (b, h, global q position i, global k position j):
///   key = {lo32(seed), hi32(seed) ^ hi32(offset)}, counter = {j/4, i, b*Hq + h, lo32(offset)},
///   r = Philox4x32_10(counter, key)[j % 4].
uint32_t dropout_bits(RngState rng, int64_t b, int64_t h, int64_t num_heads_q, int64_t i,
                      int64_t j);

/// keep = ((r >> 8) * 2^-24) >= dropout_p, with r from dropout_bits.
bool dropout_keep(RngState rng, int64_t b, int64_t h, int64_t num_heads_q, int64_t i, int64_t j,
                  float dropout_p);

/// The mask predicate of AttentionParams on global positions (and document ids; pass equal ids
/// when there are no documents): causal j <= i, window i - left <= j <= i + right (-1 =
/// unbounded), same document, and with slices, inside one slice's visible part: with the slice's
/// local row r = q_pos - q_begin of Lq rows and column c = k_pos - k_begin of Lk columns, full
/// any (r, c), causal c <= r + Lk - Lq, inv_causal c >= r, bi_causal both (MagiAttention's mask
/// types, stated here from their definition, not from the kernel's band form).
bool visible(const AttentionParams& params, int64_t q_pos, int64_t k_pos, int64_t q_doc,
             int64_t k_doc);

/// The softmax scale a problem uses: exact_scale, else params.softmax_scale, else 1 / sqrt(Dqk).
double softmax_scale(const Problem& problem);

/// Naive attention in double: for each (b, h, i) the full score row s_ij = scale <q_i, k_j>
/// (then softcap * tanh(s / softcap) with a softcap, then minus slope_h |q_pos_i - k_pos_j| with
/// ALiBi slopes), explicit mask, softmax whose denominator gains exp(sink_h) with sinks,
/// explicit dropout mask (dropout_keep), out = sum_j Z_ij P_ij v_j; backward (when
/// with_backward and dout is given) by the chain rule of the same formulas:
///   dv_j = sum_i Z_ij P_ij dout_i, dS_ij = P_ij (Z_ij <dout_i, v_j> - <dout_i, out_i>)
///   (times 1 - tanh^2(scale <q_i, k_j> / softcap) with a softcap),
///   dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i (dk, dv summed over GQA groups),
///   dsink_h = -sum_{b, i} exp(sink_h - lse_i) <dout_i, out_i> (d lse_i / d sink_h times the
///   softmax's usual -D_i).
/// Empty rows: out 0, lse -inf (sink_h with sinks), no gradient. A row with a NaN score (NaN in
/// q_i or in a k_j it sees) is NaN: its out, lse and dq, and the dk, dv (and dsink) terms of the
/// keys it sees; keys it does not see stay untouched. Cost O(B Hq Sq Sk D): a slow oracle, not a
/// kernel.
/// When `magnitudes` is given its out (and, when backward runs, dq, dk, dv, dsink) receive, per
/// element, the size of the terms that result is summed from, the scale its rounding error is
/// proportional to, cancellation included: out: sum_j Z P |v_j|; dv: sum_i Z P |dout_i|,
///   dq: |scale| sum_j P (Z sum_e |dout_ie v_je| + M_i) c_ij |k_j|, dk: likewise with |q_i|
///   (c_ij the softcap's derivative, 1 without), dsink: sum_{b, i} exp(sink - lse_i) M_i, where
///   M_i = sum_e |dout_ie| magnitude_out_ie is the size of D_i = <dout_i, out_i>'s terms
///   (dP and D_i by their terms' sizes, not their values: both dot products cancel).
///   lse: |m_i| + |log sum_i|, the two terms lse_i = m_i + log sum_i is added from (m_i the row's
///   largest score or sink).
/// Throws Error(kShapeMismatch) when a vector's length disagrees with dims.
Outputs attention(const Problem& problem, bool with_backward = true, Outputs* magnitudes = nullptr);

/// The same computation carried out entirely in fp32 (inputs rounded to float; dot products,
/// softmax and sums in float; each dot product one sum in order, as a GEMM accumulates each
/// element). This is the "plain fp32 implementation" whose error against
/// attention() sets the kernel's tolerance. Results are widened back to double.
Outputs attention_fp32(const Problem& problem, bool with_backward = true);

}  // namespace cpattn::reference
