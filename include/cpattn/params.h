// AttentionParams: what attention computes, independent of how the sequence is split
// (docs/design.md section 1), and their one validation, used by the kernel, every CP strategy,
// the fingerprint and the training job alike.
#pragma once

#include <cstdint>
#include <optional>

namespace cpattn {

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
};

/// Checks `params` for a call whose q/k head dim is `head_dim_qk` and returns them with the
/// default softmax_scale resolved (1 / sqrt(head_dim_qk) when unset), so callers that record or
/// compare parameters see the value the kernel uses. Throws Error(kInvalidArgument) naming the
/// field: a non-finite softmax_scale, no softmax_scale with head_dim_qk <= 0, dropout_p outside
/// [0, 1) (NaN included), window_left or window_right < -1.
AttentionParams resolve_params(const AttentionParams& params, int64_t head_dim_qk);

}  // namespace cpattn
