// Single-rank flash attention on CPU (forward and backward), the building block every ring step
// runs. Contract: docs/design.md sections 1 and 3.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "cpattn/isa.h"
#include "cpattn/params.h"
#include "cpattn/rng.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// The operands of one kernel call. All views are [B, S, H, D] with strides in elements.
/// - q: [B, Sq, Hq, Dqk]; k: [B, Sk, Hkv, Dqk]; v: [B, Sk, Hkv, Dv]; Hq % Hkv == 0 (GQA/MQA:
///   query head h reads kv head h / (Hq / Hkv)).
/// - q_pos[Sq], k_pos[Sk]: int64 global token positions (>= 0, any order). Masks and dropout
///   depend on these only, so a sharded sequence gives exactly the unsharded answer.
/// - q_doc[Sq], k_doc[Sk]: optional document ids (packed sequences); empty spans = one document.
///   Both or neither must be given.
struct AttentionInputs {
  ConstView q, k, v;
  std::span<const int64_t> q_pos, k_pos;
  std::span<const int64_t> q_doc, k_doc;
  /// Global head coordinates of dropout (docs/design.md section 4), for a call that holds a slice
  /// of a larger call's query heads (Ulysses and hybrid CP shard heads over ranks): query head h
  /// of this call draws the mask of head `head_offset + h` of a call with `total_heads` query
  /// heads, i.e. counter word b * total_heads + head_offset + h. Defaults (0, 0): the call's own
  /// heads, b * Hq + h. total_heads = 0 means Hq; otherwise head_offset + Hq <= total_heads.
  int64_t head_offset = 0;
  int64_t total_heads = 0;
};

/// The sizes of an attention call (AttentionInputs' names), read off its views by
/// attention_dims.
struct AttentionDims {
  int64_t B = 0, Sq = 0, Sk = 0, Hq = 0, Hkv = 0, Dqk = 0, Dv = 0;
};

/// The sizes of q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk] and v [B, Sk, Hkv, Dv], each read where
/// it first appears: B, Sq, Hq, Dqk from q; Sk, Hkv from k; Dv from v. Checks nothing (the
/// views' other dims must agree: the kernel's and validate_cp_call's checks hold them to these).
/// The one place that reads the dims off the views.
inline AttentionDims attention_dims(ConstView q, ConstView k, ConstView v) noexcept {
  return {q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]};
}

/// Execution knobs that never change the math.
struct KernelOptions {
  KernelOptions() = default;
  /// KernelOptions{threads}: `threads` workers, no interruption point.
  KernelOptions(int threads) : num_threads(threads) {}  // NOLINT(google-explicit-constructor)
  /// Worker threads for this call (>= 1). Ranks that run as threads pass 1. Results are bitwise
  /// identical for a given num_threads; they may differ in the last bits across thread counts
  /// only in backward (different dq reduction split).
  int num_threads = 1;
  /// Cooperative cancellation: when set, every worker calls it before each work item (a tile
  /// row of the forward, a k-tile chunk of the backward: milliseconds apart). An exception it
  /// throws stops the call and is rethrown to the caller. The ring passes its communicator's
  /// throw_if_group_failed, so a rank busy computing learns within a tile that its group failed,
  /// then its progress, so the ring's posted transfers move while the kernel runs.
  std::function<void()> interruption_point;
  /// The code path (cpattn/isa.h): kAuto is resolve_isa(kAuto), the fastest the CPU runs
  /// (fastest_isa) unless CPATTN_ISA names another. Results are bitwise equal on kAvx2 and
  /// kAvx512 (and kAvx512Bf16 for fp32 and fp16 calls); kGeneric (no FMA: a * b + c rounds twice)
  /// differs from them in the last bits; bf16 calls on kAvx512Bf16 run their products on
  /// vdpbf16ps and round P to bf16 before P V, so they differ from the other paths by bf16
  /// roundings, and treat bf16 denormal inputs (|x| < 2^-126) as zero (docs/design.md section 3;
  /// kernel_numerics names the three classes).
  /// Throws Error(kInvalidArgument) for a path this CPU or build lacks.
  Isa isa = Isa::kAuto;
};

/// Forward: writes out [B, Sq, Hq, Dv] (any strides) and lse fp32 [B, Hq, Sq] (contiguous,
/// natural log). q, k, v are fp32, bf16 or fp16 (one dtype per call); out is of that dtype or
/// fp32, rounded once on store; accumulation is fp32 (docs/design.md section 1.1). Outputs must not
/// alias any input (that is not detected; the result is undefined). Computes, for each (b, h, i),
/// with H = head_offset + h the head of the whole call (AttentionInputs):
///   s_ij = scale * <q_i, k_j>;  s_ij = softcap * tanh(s_ij / softcap) when softcap > 0;
///   s_ij -= alibi_slopes[H] * |q_pos_i - k_pos_j| when slopes are given;
///   lse_i = log(exp(sink[H]) + sum_{visible j} exp(s_ij))   (no exp(sink) term without sinks),
///   out_i = sum_{visible j} keep_ij / (1 - p) * exp(s_ij - lse_i) * v_j.
/// A row with no visible key gets out_i = 0 and lse_i = -inf (sink[H] with a sink). Online
/// softmax with fp32 accumulation (FlashAttention-2, Dao 2023, Alg. 1); never materialises an
/// Sq x Sk matrix. Per-head parameters have the length of the whole call's heads (total_heads,
/// or Hq).
/// Throws Error(kShapeMismatch | kInvalidArgument) naming expected vs got for any bad shape,
/// stride, span length, position, or parameter.
void attention_kernel_forward(const AttentionInputs& in, const AttentionParams& params,
                              RngState rng, View out, std::span<float> lse,
                              const KernelOptions& options = {});

/// The online-softmax state of a forward split over several calls, each over another set of keys
/// of the same queries (the ring's blocks): FlashAttention's running row maximum m_i and row sum
/// l_i (Dao 2023, Alg. 1; Milakov & Gimelshein 2018), fp32 [B, Hq, Sq] contiguous, together with
/// `out`, which holds the unnormalised accumulator O_i = sum_j exp(s_ij - m_i) Z_ij v_j between
/// the calls (m_i = -inf, l_i = 0, O_i = 0 before any visible key). A call continues the state
/// key tile by key tile as one call over all the keys would (bitwise so when every call but the
/// last covers a multiple of the 128-key tile; otherwise the tiles are cut where the calls
/// split), so a result split over N calls carries the roundings of one online softmax, not those
/// of N - 1 merges of normalised partials (which grow with N: docs/design.md section 5.4).
struct SoftmaxCarry {
  std::span<float> row_max;  ///< m_i
  std::span<float> row_sum;  ///< l_i
  /// true: out, row_max and row_sum hold the state after earlier calls and are continued;
  /// false: the state starts empty (their contents are ignored).
  bool resume = false;
  /// true: the call ends like an ordinary forward, out_i = O_i / l_i and lse_i = m_i + ln l_i
  /// (0 and -inf for rows without a visible key; row_max and row_sum are then unspecified);
  /// false: out keeps O, row_max and row_sum the state, and lse is not written.
  bool finish = true;
};

/// Forward over one more set of keys of a split softmax (SoftmaxCarry): like the forward above,
/// with out, lse and the carry as the carry's flags say. An ordinary forward is {resume = false,
/// finish = true} (the carry's spans may then be empty). Throws like the forward, and
/// Error(kShapeMismatch) when row_max or row_sum is not of length B * Hq * Sq.
void attention_kernel_forward(const AttentionInputs& in, const AttentionParams& params,
                              RngState rng, View out, std::span<float> lse,
                              const SoftmaxCarry& carry, const KernelOptions& options = {});

/// The backward kernel's options: the kernel options every call takes, plus its extra inputs and
/// modes.
struct BackwardOptions {
  /// Threads, interruption point and code path, as for the forward.
  KernelOptions kernel;
  /// When true, dq/dk/dv are incremented (+=) instead of overwritten; the ring uses this to sum
  /// contributions of several k/v blocks in a fixed order.
  bool accumulate = false;
  /// With accumulate, dk and dv are still overwritten (only dq accumulates): the ring's first
  /// share of a block's dk/dv needs no zeroed buffer.
  bool overwrite_dkdv = false;
  /// When set, called once per call before any element of dk or dv is read or written (by the
  /// first worker to get there; the others wait until it returned; never when there is no
  /// work item). The ring waits here for the dk/dv accumulator it adds into, so its transfer
  /// overlaps the work before the first write. An exception it throws stops the call.
  std::function<void()> before_dkdv;
  /// Optional precomputed D_i = <dout_i, out_i>, fp32 [B, Hq, Sq]. When empty, the kernel
  /// computes it from dout and out.
  std::span<const float> delta;
  /// When non-empty (params.sink must be set), receives the sinks' gradient from this call's
  /// rows, fp32 [total heads] (AttentionInputs::total_heads, or Hq):
  ///   dsink[H] = -sum_{b, i} exp(sink[H] - lse_i) * D_i     for the call's heads H,
  /// overwritten, or added with `accumulate`; entries of heads outside the call are untouched.
  /// It depends on the rows alone (lse and D), not on the keys: a split backward (the ring's
  /// blocks) asks for it in one call of the split only.
  std::span<float> dsink;
};

/// Backward (FlashAttention-2, Dao 2023, Alg. 2): given dout [B, Sq, Hq, Dv], the forward's out
/// and lse (of the whole visible key set, so a ring passes the merged ones), and the same
/// RngState, computes with P_ij = exp(s_ij - lse_i), Z_ij = keep_ij / (1 - p), D_i = <dout_i,
/// out_i>:
///   dv_j = sum_i Z_ij P_ij dout_i
///   dP_ij = Z_ij <dout_i, v_j>,  dS_ij = P_ij (dP_ij - D_i)
///   dq_i = scale * sum_j dS_ij k_j,  dk_j = scale * sum_i dS_ij q_i
/// dk/dv are summed over the GQA group. Shapes: dq like q, dk like k, dv like v (any strides);
/// dq/dk/dv must not alias any input.
/// Rows with lse = -inf contribute nothing. With softcap, dS_ij is multiplied by the derivative
/// of the cap, 1 - tanh^2(scale <q_i, k_j> / softcap); ALiBi slopes and sinks are constants of
/// the scores (sinks get their own gradient: BackwardOptions::dsink). dout has the inputs'
/// dtype; dq, dk, dv are of it or fp32 (rounded once on store, fp32 sums). Throws like the
/// forward.
void attention_kernel_backward(const AttentionInputs& in, const AttentionParams& params,
                               RngState rng, ConstView dout, ConstView out,
                               std::span<const float> lse, View dq, View dk, View dv,
                               const BackwardOptions& options = {});

/// D_i = <dout_i, out_i> of every row, fp32 delta [B, Hq, Sq] contiguous, from dout and out
/// [B, Sq, Hq, Dv] (any strides): the backward's precomputed `delta` (FlashAttention-2 Alg. 2
/// line 4). The same function the backward uses when no delta is given. Throws
/// Error(kShapeMismatch) when the shapes or delta's length disagree.
void attention_kernel_delta(ConstView dout, ConstView out, std::span<float> delta,
                            const KernelOptions& options = {});

/// Owned results for callers that want dense BSHD tensors.
struct KernelForwardResult {
  Tensor out;  ///< [B, Sq, Hq, Dv]
  Tensor lse;  ///< fp32 [B, Hq, Sq]
};
/// The gradients of one attention call, dense BSHD: dq [B, Sq, Hq, Dqk], dk [B, Sk, Hkv, Dqk],
/// dv [B, Sk, Hkv, Dv] (dk/dv summed over the GQA group and, for a CP group, over every rank's
/// queries). The one gradients type of the kernel, the CP strategies and the state API.
struct AttentionGradients {
  Tensor dq;
  Tensor dk;
  Tensor dv;
  /// fp32 [Hq of the whole call]: the gradient of AttentionParams::sink (BackwardOptions::dsink;
  /// under CP summed over every rank's rows, the same on every rank, unless
  /// CpOptions::reduce_dsink is false: then each rank's own share); empty without sinks.
  Tensor dsink{};
};
KernelForwardResult attention_kernel_forward(const AttentionInputs& in,
                                             const AttentionParams& params, RngState rng,
                                             const KernelOptions& options = {});
AttentionGradients attention_kernel_backward(const AttentionInputs& in,
                                             const AttentionParams& params, RngState rng,
                                             ConstView dout, ConstView out,
                                             std::span<const float> lse,
                                             const KernelOptions& options = {});

}  // namespace cpattn
