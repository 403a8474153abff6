// AttentionParams: what attention computes, independent of how the sequence is split
// (docs/design.md section 1), and their one validation, used by the kernel, every CP strategy,
// the fingerprint and the training job alike.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace cpattn {

/// The shape of a mask slice's visible region inside its rectangle (MaskSlice), MagiAttention's
/// four AttnSlice mask types. With the slice's query rows i = qp - q_begin < Lq = q_end - q_begin
/// and key columns j = kp - k_begin < Lk = k_end - k_begin:
enum class SliceType : uint8_t {
  kFull,           ///< every pair of the rectangle
  kCausal,         ///< j <= i + (Lk - Lq): the lower triangle, aligned bottom-right
  kInverseCausal,  ///< j >= i: the upper triangle, aligned top-left
  kBiCausal,       ///< i <= j <= i + (Lk - Lq): both (empty when Lq > Lk)
};

/// "full" | "causal" | "inv_causal" | "bi_causal"; "?" for a value that is none of them.
const char* slice_type_name(SliceType type) noexcept;
/// Inverse of slice_type_name; throws Error(kInvalidArgument) naming the accepted names.
SliceType parse_slice_type(std::string_view name);

/// One rectangle of the (query position, key position) plane and the part of it that is visible
/// (MagiAttention's AttnSlice, on global positions): key position kp is visible to query
/// position qp through this slice iff q_begin <= qp < q_end, k_begin <= kp < k_end and
/// dl <= kp - qp <= du, where dl = k_begin - q_begin for kInverseCausal and kBiCausal (else
/// unbounded) and du = k_end - q_end for kCausal and kBiCausal (else unbounded).
struct MaskSlice {
  int64_t q_begin = 0, q_end = 0;  ///< query positions [q_begin, q_end)
  int64_t k_begin = 0, k_end = 0;  ///< key positions [k_begin, k_end)
  SliceType type = SliceType::kFull;
  friend bool operator==(const MaskSlice&, const MaskSlice&) = default;
};

/// The range of a nonzero AttentionParams::softcap, 2^-60 .. 2^60: the kernel computes
/// 1 / softcap and products of about 1000 softcap in fp32 (docs/design.md section 3).
inline constexpr float kMinSoftcap = 0x1.0p-60f;
inline constexpr float kMaxSoftcap = 0x1.0p60f;
/// The largest |AttentionParams::alibi_slopes[h]|, 2^60: slope x |q_pos - k_pos| stays finite in
/// fp32 for any int64 positions.
inline constexpr float kMaxAlibiSlope = 0x1.0p60f;

/// The parameters of one attention call.
struct AttentionParams {
  /// Multiplies <q, k>. Default (nullopt): 1 / sqrt(Dqk). Must be finite.
  std::optional<float> softmax_scale;
  /// Key j is visible to query i only if k_pos[j] <= q_pos[i].
  bool causal = false;
  /// Sliding window on global positions: q_pos - window_left <= k_pos <= q_pos + window_right.
  /// -1 = unbounded on that side; 0 is allowed (only the same position). Combines with causal.
  int64_t window_left = -1;
  int64_t window_right = -1;
  /// Probability of dropping an attention probability, in [0, 1). Kept values are scaled by
  /// 1 / (1 - dropout_p). The mask follows the contract of rng.h (docs/design.md section 4).
  float dropout_p = 0.0f;
  /// Logit soft-capping (Gemma 2, Grok): when > 0, every scaled score s = softmax_scale <q, k>
  /// becomes softcap * tanh(s / softcap) before ALiBi and masking; 0 = off. Otherwise in
  /// [kMinSoftcap, kMaxSoftcap] with softmax_scale / softcap finite in fp32.
  float softcap = 0.0f;
  /// ALiBi (Press et al. 2022), one slope per query head of the whole call (length Hq; empty =
  /// off): s_ij -= alibi_slopes[h] * |q_pos_i - k_pos_j| on global positions, after softcap.
  /// Finite, |slope| <= kMaxAlibiSlope.
  std::vector<float> alibi_slopes{};
  /// Attention sinks (gpt-oss), one logit per query head of the whole call (length Hq; empty =
  /// off): added once to every row's softmax denominator, lse_i = ln(exp(sink_h) + sum_visible
  /// exp(s_ij)); their gradient is AttentionGradients::dsink. Finite.
  std::vector<float> sink{};
  /// A mask given as slices (empty = none): a pair is visible only if one slice makes it visible
  /// (and causal, the windows and the documents allow it too). No pair may be made visible by
  /// two slices (MagiAttention's rule: its kernels would count it twice); resolve_params refuses
  /// overlapping slices.
  std::vector<MaskSlice> slices{};
};

/// Checks `params` for a call whose q/k head dim is `head_dim_qk` and whose whole call has
/// `num_heads` query heads (Hq; under Ulysses the heads of every rank), and returns them with
/// the default softmax_scale resolved (1 / sqrt(head_dim_qk) when unset), so callers that record
/// or compare parameters see the value the kernel uses. Throws Error(kInvalidArgument) naming
/// the field: a non-finite softmax_scale, no softmax_scale with head_dim_qk <= 0, dropout_p
/// outside [0, 1) (NaN included), window_left or window_right < -1, softcap negative or not
/// finite, a non-finite ALiBi slope or sink logit, a slice with a negative or reversed range or
/// an unknown type, two slices that make one pair visible (naming both and the pair); and
/// Error(kShapeMismatch) when alibi_slopes or sink is neither empty nor of length num_heads.
AttentionParams resolve_params(const AttentionParams& params, int64_t head_dim_qk,
                               int64_t num_heads);

}  // namespace cpattn
