// Named verification cases for the kernel: build a random problem from a short spec, run the
// kernel on it in any memory layout, and judge its error against the double reference.
// Shared by the test suite and `cpattn verify`.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "cpattn/tensor.h"
#include "verify/reference.h"

namespace cpattn::reference {

/// Mask families a case can use (window sizes are fixed per kind, see make_problem). The last
/// four are mask slices (AttentionParams::slices) over the positions the case uses, n = the
/// largest position + 1: prefix-LM (every query sees the first n/3 positions, causal after),
/// documents (one causal slice per document_of document), shared-prefix packing (a causal prefix
/// of n/4 positions that every later document sees in full, each document causal in itself) and
/// random slices (a random grid of query and key cuts, each cell a random type or empty).
enum class MaskKind {
  kNone,
  kCausal,
  kWindow,
  kCausalWindow,
  kDocs,
  kDocsCausal,
  kPrefixLmSlices,
  kDocSlices,
  kSharedPrefixSlices,
  kRandomSlices,
};
const char* mask_kind_name(MaskKind kind) noexcept;

/// How the global positions of the local q and k rows are laid out (Sq != Sk allowed):
/// kContiguous: both runs end at the same position (bottom-right aligned, like a KV cache);
/// kZigzag: rank 0 of a 2-rank zigzag split (chunks 0 and 3 of 4), two runs with a gap;
/// kStriped: round-robin ranks 1 (q) and 2 (k) of 4, then shuffled, so positions are
/// non-monotone.
enum class PositionKind { kContiguous, kZigzag, kStriped };
const char* position_kind_name(PositionKind kind) noexcept;

/// A short description of one random attention problem and the layout to run it in.
struct CaseSpec {
  MaskKind mask = MaskKind::kNone;
  Dims dims;
  PositionKind positions = PositionKind::kContiguous;
  float dropout_p = 0.0f;
  MemoryLayout layout = MemoryLayout::kBSHD;
  uint64_t seed = 1;  ///< inputs, positions and the dropout RngState derive from it
  /// The dtype of q, k, v, dout and of the results out, dq, dk, dv (lse is always fp32): the
  /// problem's inputs are rounded to it (make_problem) and the plain implementation's results
  /// too (make_oracle), so the tolerance rule below stays FlashAttention's.
  DType dtype = DType::kF32;
  /// Attention sinks: one logit per head, N(0, 2^2) from the seed (AttentionParams::sink).
  bool sink = false;
  /// AttentionParams::softcap (0: off).
  float softcap = 0.0f;
  /// ALiBi with the geometric slopes of Press et al., 2^(-8 (h + 1) / Hq) for head h.
  bool alibi = false;
  /// Mask slices given by the caller (AttentionParams::slices, global positions), after the
  /// slices of a slice MaskKind and combined with the kind's causal, window and documents.
  std::vector<MaskSlice> slices{};
};

/// A spec from its fields in declaration order (the test sweeps' shorthand).
inline CaseSpec spec_of(MaskKind mask, Dims dims, PositionKind positions, float dropout_p,
                        uint64_t seed, MemoryLayout layout = MemoryLayout::kBSHD) {
  CaseSpec s;
  s.mask = mask;
  s.dims = dims;
  s.positions = positions;
  s.dropout_p = dropout_p;
  s.layout = layout;
  s.seed = seed;
  return s;
}

/// Readable unique name, e.g. "Causal_GQA8x2_Sq97_Sk1025_D192x128_p0p1_BHSD" (plus "_Zigzag",
/// "_Striped", "_B3", "_bf16" / "_fp16", "_sink", "_cap3", "_alibi" and "_slices2" (the number
/// of CaseSpec::slices) when not the defaults).
/// Only letters, digits and '_'.
std::string case_name(const CaseSpec& spec);

/// Global positions (q_pos, k_pos) for Sq, Sk rows laid out as `kind` (see PositionKind).
std::array<std::vector<int64_t>, 2> make_positions(PositionKind kind, int64_t sq, int64_t sk,
                                                   uint64_t seed);

/// Document id of a global position for packed sequences whose lengths cycle through
/// {1, 23, 5, 120, 64, 1, 300, 9, 511} (length-1 documents included on purpose).
int64_t document_of(int64_t position);

/// The problem a spec describes: inputs ~ N(0, 1) rounded to float (so the kernel sees exactly
/// the reference's inputs), dout ~ N(0, 1), masks per MaskKind (window: left 37, right 5;
/// causal+window: left 100), documents from document_of, then spec.slices, the score features of
/// the spec, RngState derived from the seed. For a bf16 or fp16 spec, q, k, v and dout are then
/// rounded to that dtype (round_inputs).
Problem make_problem(const CaseSpec& spec);

/// The mask slices of a slice MaskKind over positions [0, n) (empty for the other kinds); the
/// random kind draws from `seed`.
std::vector<MaskSlice> make_slices(MaskKind kind, int64_t n, uint64_t seed);

/// A varlen problem (flash-attn's cu_seqlens, cpattn/varlen.h): make_problem of `spec` with
/// Sq = total_q, Sk = total_k (B must be 1: a thd call) and the positions and document ids
/// varlen_tokens gives the cumulative lengths (spec.positions is not used; spec.mask's causal
/// flag and window apply within each document). Throws varlen_tokens' errors and
/// Error(kInvalidArgument) when spec.dims.B != 1.
Problem make_varlen_problem(CaseSpec spec, std::span<const int64_t> cu_seqlens_q,
                            std::span<const int64_t> cu_seqlens_k);

/// Rounds q, k, v and dout of `problem` to `dtype` (through float; dtype.h's rounding): the
/// values a kernel fed with that dtype sees, so the double reference answers for exactly them.
void round_inputs(Problem& problem, DType dtype);

/// The BSHD doubles x as a tensor of `dtype` stored in `layout` order (rounded to float, then to
/// dtype), shape storage_shape(shape, layout); charged to `counter` (process_memory() when null).
/// An empty x gives zeros; otherwise x.size() must be the shape's element count
/// (Error(kShapeMismatch)).
Tensor to_tensor(const std::vector<double>& x, const std::array<int64_t, 4>& shape,
                 MemoryLayout layout = MemoryLayout::kBSHD, MemoryCounter* counter = nullptr,
                 DType dtype = DType::kF32);
/// A view's elements (any dtype) as flat BSHD doubles.
std::vector<double> to_doubles(ConstView view);
/// Floats widened to double, in order (lse buffers, whole tensors in storage order).
std::vector<double> to_doubles(std::span<const float> x);

/// The whole problem's inputs rounded to float, dense BSHD: q [B, Sq, Hq, Dqk], k [B, Sk, Hkv,
/// Dqk], v [B, Sk, Hkv, Dv], dout [B, Sq, Hq, Dv] (zeros when the problem has none).
struct ProblemTensors {
  explicit ProblemTensors(const Problem& p);
  Tensor q, k, v, dout;
};

/// How run_kernel calls the kernel.
struct KernelRun {
  MemoryLayout layout = MemoryLayout::kBSHD;
  int num_threads = 1;
  bool backward = true;
  Isa isa = Isa::kAuto;       ///< the kernel's code path (KernelOptions::isa)
  DType dtype = DType::kF32;  ///< of q, k, v, dout, out, dq, dk, dv
};

/// Runs attention_kernel_forward (and backward) on the problem with tensors of run.dtype stored
/// in run.layout; returns the results as flat BSHD doubles (gradients empty without backward).
Outputs run_kernel(const Problem& problem, const KernelRun& run);

/// Runs each document of a varlen problem alone through the kernel, as a one-document varlen call
/// of its own (positions from varlen_tokens of that document only, so the causal and window
/// alignment is the document's own bottom-right one), and places the results in whole-problem
/// Outputs (lse [1, Hq, Sq]; dsink, with sinks, summed over the documents). Equal to run_kernel
/// of the whole problem up to rounding, without dropout and mask slices (with dropout the
/// documents' positions, and so their masks, differ; slices are on global positions).
Outputs run_kernel_per_document(const Problem& problem, std::span<const int64_t> cu_seqlens_q,
                                std::span<const int64_t> cu_seqlens_k, const KernelRun& run);

/// Max |a - b| over two equally long vectors; equal infinities and NaN on both sides count as 0,
/// NaN on one side as +inf.
/// Throws Error(kShapeMismatch) when the lengths differ.
double max_abs_error(const std::vector<double>& a, const std::vector<double>& b);

/// The tensors every row reports, in this order (dsink only in cases with sinks).
inline constexpr std::array<const char*, 6> kTensorNames = {"out", "lse", "dq",
                                                            "dk",  "dv",  "dsink"};

/// Everything a kernel result is judged against: the double answer, the magnitudes of the terms
/// behind each gradient element (attention()'s `magnitudes`), and the plain fp32 answer.
struct Oracle {
  Outputs exact, magnitude, fp32;
  DType dtype = DType::kF32;  ///< of the inputs and results the oracle judges (make_oracle)
};
/// Runs attention() with magnitudes and attention_fp32() on the problem; for a bf16 or fp16
/// `dtype` the plain answer's out, dq, dk, dv are rounded to it (lse stays fp32), as a plain
/// implementation that stores its results in that dtype would give.
Oracle make_oracle(const Problem& problem, bool with_backward = true, DType dtype = DType::kF32);

/// Tolerance rule, per tensor t of out, lse, dq, dk, dv, dsink:
///   err_t <= kTolFactor * err_fp32_t + kTolAbs + kTolUlps * eps_fp32 * max(magnitude_t)
///            (+ kTolLseUlps * eps_fp32 * max_i |lse_i| * max(magnitude_t) for the gradients)
/// err_t: max abs error vs the double answer; err_fp32_t: that of the plain fp32 implementation.
/// bf16 / fp16 cases apply the same rule with the plain implementation that takes the inputs in
/// that dtype, computes in fp32 and rounds its results to that dtype (make_oracle), against the
/// double answer on those same inputs: output rounding (2^-9 relative for bf16, 2^-12 for fp16)
/// dominates both errors, and kTolAbs is the stated absolute term for all dtypes.
/// The first two terms are FlashAttention's rule ("within 2x of a plain implementation"; the
/// plain one sums each dot product in order, as a GEMM does: reference.h). The last is rounding
/// the flash backward adds by design and the plain one does not have, a few ulps of the size of
/// the summed terms: P is recomputed as exp(scale s - lse) with the kernel's polynomial exp
/// (simd.h, within 1.05 ulps); and D = <dout, out> is summed in another order than dP, so
/// dS = P (dP - D) does not cancel exactly (a row that sees one key has dS = 0 exactly in the
/// plain implementation). Measured need over the kernel sweep: <= 2.8 ulps; kTolUlps keeps ~3x
/// margin. (The lse that recomputation reads is fp32: kTolLseUlps below.) out gets the same term:
/// the flash forward's exp (2^((s - m) log2 e), within 1.3 ulps and the multiply's rounding; the
/// plain one's 0.5), its rescales by exp(m_old - m_new) and its normalisation by a reciprocal add a
/// few ulps of the terms' size sum_j Z P |v_j| that the plain softmax does not have, and where the
/// plain implementation happens to round well (few visible keys, dropout doubling each term) twice
/// its error is below them (measured: a causal window of 3 keys at dropout 0.5 needed 2.6 ulps).
/// lse gets it too, of |m_i| + |log l_i| (the running max and the log of the running sum it is
/// added from): where the plain implementation rounds its lse well, the kernel's other order of
/// the same sum differs by an ulp or two of those terms (measured: 1.1x the rule without it in a
/// random fp16 case).
/// Bugs (a wrong mask element, tile or dropout bit) give errors of order 1e-2 of the magnitude,
/// far above it.
/// For bf16 / fp16, out and the gradients get one more term, kTolUlps16 * u * max(magnitude_t)
/// with u the dtype's unit roundoff (2^-8 bf16, 2^-11 fp16). Each result is rounded to the dtype
/// where it is stored (<= u/2 of its size); the kernel's fp32 value differs from the plain one's by
/// a few fp32 ulps, so the two may round to neighbouring values, and where the plain one happens
/// to round well (a result of a few elements) twice its error is below that step. And the
/// backward receives out as the forward stored it, so D_i = <dout_i, out_i> carries a relative
/// error of u where the plain implementation uses its unrounded out, and dS = P (dP - D) no longer
/// cancels (a row that sees one key has dS = 0 exactly in the plain implementation, not in any
/// flash backward fed a rounded out, FlashAttention's included).
inline constexpr double kTolFactor = 2.0;
inline constexpr double kTolAbs = 1e-6;
inline constexpr double kTolUlps = 8.0;
inline constexpr double kEpsFp32 = 0x1.0p-23;
inline constexpr double kTolUlps16 = 2.0;
/// The gradients (dq, dk, dv, dsink) get one more term, kTolLseUlps * eps_fp32 * max_i |lse_i| *
/// max(magnitude_t), lse_i the exact answer's finite entries. The backward recomputes every
/// probability as exp(scale s_ij - lse_i) (and the sink's as exp(sink - lse_i)) from the lse the
/// forward stored in fp32, m_i + ln l_i rounded once (<= 2^-24 |lse_i|) after ln l_i's own few
/// ulps of a value far smaller than |lse_i| where |lse_i| is large: so each P_ij carries a
/// relative error of about 2^-24 |lse_i|, and each gradient, a sum of P times its other factors,
/// at most that times its magnitude. The plain implementation normalises the keys' probabilities
/// by its own row sum (only its sink's reads its lse), so without the term the rule would charge
/// the fp32 lse of the design's forward-to-backward contract (FlashAttention's too) as the
/// kernel's error: where scores are in the hundreds (|lse| ~ 250-1000), dv measured 3-13x the
/// other terms. One ulp (2^-23) of |lse| is 2x the lse's rounding; at the sweep's |lse| of 5-8
/// the term is a few ulps of the magnitude, like kTolUlps's. The bound is coarse: it takes the
/// call's largest |lse| and largest magnitude for every element, so one head with a large |lse|
/// (a sink logit of 1000) loosens every head's gradients, and dq, whose error is about
/// 2^-24 |lse_i| |dq_i|, gets the bound of its magnitude (measured in the integer cases of
/// KernelAdversarial.LargeScoresWithinTheRule: dq 0.01 of its tolerance, dv 0.1-0.25).
inline constexpr double kTolLseUlps = 1.0;
/// For bf16 out and gradients one more term, kTolProducts16 * u * max(magnitude_t): a bf16
/// kernel may run its products on bf16 operands, rounding each fp32 value it multiplies once
/// (relative error <= u), as the avx512bf16 path and FlashAttention on GPUs do: P before P V in
/// the forward, which moves out_i by at most u sum_j Z P |v_j| = u magnitude_out_i (and D_i, so
/// the gradients, by at most u times its magnitude: reference.h), and Z P and dS before the
/// backward's dV, dK and dQ products, which move each gradient by at most u times its magnitude.
/// Each bound has factor 1. The plain implementation keeps them in fp32, so without the term the
/// rule would charge those roundings as errors (measured: out up to 1.6x the other terms in
/// random dropout cases). fp16 calls widen on every path and keep the rule without it.
inline constexpr double kTolProducts16 = 1.0;

/// The verdict on one case: per tensor (kTensorNames order) the error and its tolerance.
struct ErrorRow {
  std::string name;
  std::array<double, kTensorNames.size()> err{};
  std::array<double, kTensorNames.size()> tol{};
  bool pass() const;
};

/// Applies the tolerance rule to `got` (gradients skipped when got has none).
ErrorRow compare(std::string name, const Oracle& oracle, const Outputs& got);

/// make_problem + both references + run_kernel (spec.layout, num_threads, isa) + compare.
ErrorRow check_kernel_case(const CaseSpec& spec, int num_threads = 1, Isa isa = Isa::kAuto);

}  // namespace cpattn::reference
