// The plain description of one kernel call that the validation layer fills in (validate.h) and
// the forward/backward drivers consume without re-checking anything.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "cpattn/isa.h"
#include "cpattn/kernel.h"

namespace cpattn::detail {

/// Sizes, views, positions and mask/dropout parameters of a forward call. Every field has been
/// validated: shapes agree, strides are >= 0, positions >= 0, spans have the right lengths.
struct Problem : AttentionDims {
  int64_t group = 1;  ///< Hq / Hkv: query heads sharing one kv head
  /// The inputs' dtype (q, k, v, dout); results are this dtype or fp32 (validate.h).
  DType dtype = DType::kF32;
  ConstView q, k, v;
  std::span<const int64_t> q_pos, k_pos;
  std::span<const int64_t> q_doc, k_doc;  ///< both empty or both full length
  bool has_docs = false;
  /// The caller's parameters (alive for the call): the mask (causal, windows, slices) is built
  /// from them; the resolved values the hot loops read are the fields below.
  const AttentionParams* params = nullptr;
  float scale = 1.0f;  ///< softmax_scale, resolved
  float dropout_p = 0.0f;
  float softcap = 0.0f;                   ///< 0: off
  std::span<const float> alibi_slopes{};  ///< [dropout_heads] or empty, by global head
  std::span<const float> sink{};          ///< [dropout_heads] or empty, by global head
  RngState rng;
  /// The global head coordinates (AttentionInputs::head_offset / total_heads, resolved): head h
  /// is head dropout_head_offset + h of a call with dropout_heads query heads, for dropout and
  /// the per-head ALiBi slopes and sinks.
  int64_t dropout_head_offset = 0, dropout_heads = 0;
  int num_threads = 1;
  const std::function<void()>* interruption_point = nullptr;  ///< KernelOptions', when set
  Isa isa = Isa::kGeneric;                                    ///< resolved (never kAuto)
};

/// Forward call: the Problem plus where the results go.
struct ForwardProblem : Problem {
  View out;              ///< [B, Sq, Hq, Dv]
  std::span<float> lse;  ///< [B, Hq, Sq]
  /// SoftmaxCarry (kernel.h): running max and sum [B, Hq, Sq], both empty without a carry.
  std::span<float> row_max, row_sum;
  bool resume = false;  ///< out/row_max/row_sum hold the state of earlier calls
  bool finish = true;   ///< normalise into out and lse at the end
};

/// Backward call: the Problem plus the saved forward results and the gradients to produce.
struct BackwardProblem : Problem {
  ConstView dout, out;           ///< [B, Sq, Hq, Dv]
  std::span<const float> lse;    ///< [B, Hq, Sq]
  std::span<const float> delta;  ///< [B, Hq, Sq] or empty (computed from dout and out)
  View dq, dk, dv;               ///< like q, k, v
  bool accumulate = false;
  bool overwrite_dkdv = false;                         ///< BackwardOptions'
  std::span<float> dsink{};                            ///< BackwardOptions', when a sink is set
  const std::function<void()>* before_dkdv = nullptr;  ///< BackwardOptions', when set
};

}  // namespace cpattn::detail
