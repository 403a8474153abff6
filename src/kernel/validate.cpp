// Argument checks of the kernel API (validate.h): every message names what was expected and what
// came, e.g. "k must have shape [B, Sk, Hkv, Dqk] = [2, 97, 2, 64], got [2, 97, 2, 40]".
#include "kernel/validate.h"

#include <array>
#include <cmath>
#include <string>

#include "cpattn/error.h"
#include "cpattn/mask.h"

namespace cpattn::detail {
namespace {

using Shape = std::array<int64_t, 4>;

// An output written through a stride-0 dimension of size > 1 would have one element stored by
// several work items (threads) at once: a data race, and a meaningless result. (Other overlaps,
// e.g. strides smaller than the extent of the next dimension, are not detected.)
void check_no_self_overlap(const View& view, const char* name) {
  if (view.numel() == 0) return;
  for (int i = 0; i < 4; ++i) {
    CPATTN_CHECK(view.shape[i] <= 1 || view.stride[i] != 0, ErrorCode::kShapeMismatch, name,
                 " is written, so its elements must not overlap: dimension ", i, " has size ",
                 view.shape[i], " but stride 0 (strides ", shape_string(view.stride), ")");
  }
}

// Inputs q, k, v (and dout) share one dtype, the call's; every operand named here must have it.
void check_input_dtype(ConstView view, const char* name, DType dtype) {
  CPATTN_CHECK(view.dtype == dtype, ErrorCode::kInvalidArgument,
               "q, k, v and dout must have one dtype: q is ", dtype_name(dtype), " but ", name,
               " is ", dtype_name(view.dtype));
}

// A result (or the forward's out read back) is in the inputs' dtype or in fp32 (no rounding:
// the accumulators of a split call, e.g. the ring's dk/dv and carried out).
void check_output_dtype(ConstView view, const char* name, DType dtype) {
  CPATTN_CHECK(view.dtype == dtype || view.dtype == DType::kF32, ErrorCode::kInvalidArgument, name,
               " must be ", dtype_name(dtype), " (the dtype of q, k, v) or fp32, got ",
               dtype_name(view.dtype));
}

void check_positions(std::span<const int64_t> pos, int64_t expected_len, const char* name,
                     const char* len_name) {
  CPATTN_CHECK(static_cast<int64_t>(pos.size()) == expected_len, ErrorCode::kShapeMismatch, name,
               " must have length ", len_name, " = ", expected_len, ", got ", pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    CPATTN_CHECK(pos[i] >= 0, ErrorCode::kInvalidArgument, name, "[", i,
                 "] must be a position >= 0, got ", pos[i]);
  }
}

// Everything shared by forward and backward: q/k/v, positions, documents, params, threads.
void fill_problem(const AttentionInputs& in, const AttentionParams& params, RngState rng,
                  const KernelOptions& options, Problem& p) {
  // The first operands fix B, Sq, Hq, Dqk, ...; their own dims only need to be >= 0.
  check_readable(in.q, "q");
  check_readable(in.k, "k");
  check_readable(in.v, "v");
  static_cast<AttentionDims&>(p) = attention_dims(in.q, in.k, in.v);
  check_view(in.q, "q", "[B, Sq, Hq, Dqk]", {p.B, p.Sq, p.Hq, p.Dqk});
  check_view(in.k, "k", "[B, Sk, Hkv, Dqk]", {p.B, p.Sk, p.Hkv, p.Dqk});
  check_view(in.v, "v", "[B, Sk, Hkv, Dv]", {p.B, p.Sk, p.Hkv, p.Dv});
  CPATTN_CHECK(p.Hkv > 0 || p.Hq == 0, ErrorCode::kShapeMismatch,
               "k/v need at least one head when q has Hq = ", p.Hq, " heads, got Hkv = 0");
  CPATTN_CHECK(p.Hkv == 0 || p.Hq % p.Hkv == 0, ErrorCode::kShapeMismatch,
               "Hq must be a multiple of Hkv (GQA/MQA), got Hq = ", p.Hq, ", Hkv = ", p.Hkv);
  p.group = p.Hkv > 0 ? p.Hq / p.Hkv : 1;
  p.dtype = in.q.dtype;
  check_input_dtype(in.k, "k", p.dtype);
  check_input_dtype(in.v, "v", p.dtype);
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;

  check_positions(in.q_pos, p.Sq, "q_pos", "Sq");
  check_positions(in.k_pos, p.Sk, "k_pos", "Sk");
  p.q_pos = in.q_pos;
  p.k_pos = in.k_pos;
  const bool has_q_doc = !in.q_doc.empty(), has_k_doc = !in.k_doc.empty();
  check_documents_together(in.q_doc.size(), in.k_doc.size(), p.Sq, p.Sk, "q_doc and k_doc");
  if (has_q_doc || has_k_doc) {
    CPATTN_CHECK(static_cast<int64_t>(in.q_doc.size()) == p.Sq, ErrorCode::kShapeMismatch,
                 "q_doc must have length Sq = ", p.Sq, ", got ", in.q_doc.size());
    CPATTN_CHECK(static_cast<int64_t>(in.k_doc.size()) == p.Sk, ErrorCode::kShapeMismatch,
                 "k_doc must have length Sk = ", p.Sk, ", got ", in.k_doc.size());
    p.has_docs = p.Sq > 0 && p.Sk > 0;
    p.q_doc = in.q_doc;
    p.k_doc = in.k_doc;
  }

  CPATTN_CHECK(in.head_offset >= 0 && in.total_heads >= 0, ErrorCode::kInvalidArgument,
               "head_offset and total_heads must be >= 0, got ", in.head_offset, " and ",
               in.total_heads);
  CPATTN_CHECK(in.total_heads == 0 || in.head_offset + p.Hq <= in.total_heads,
               ErrorCode::kInvalidArgument, "head_offset + Hq must be <= total_heads, got ",
               in.head_offset, " + ", p.Hq, " > ", in.total_heads);
  p.dropout_head_offset = in.head_offset;
  p.dropout_heads = in.total_heads > 0 ? in.total_heads : p.Hq;
  // Per-head parameters (ALiBi slopes, sinks) cover the heads of the whole call.
  const AttentionParams resolved = resolve_params(params, p.Dqk, p.dropout_heads);
  CPATTN_CHECK(options.num_threads >= 1, ErrorCode::kInvalidArgument,
               "num_threads must be >= 1, got ", options.num_threads);
  p.params = &params;
  p.scale = *resolved.softmax_scale;
  p.dropout_p = resolved.dropout_p;
  p.softcap = resolved.softcap;
  p.alibi_slopes = params.alibi_slopes;
  p.sink = params.sink;
  p.rng = rng;
  p.num_threads = options.num_threads;
  if (options.interruption_point) p.interruption_point = &options.interruption_point;
  p.isa = resolve_isa(options.isa);
}

void check_row_stats(size_t got, const Problem& p, const char* name) {
  const int64_t expected = p.B * p.Hq * p.Sq;
  CPATTN_CHECK(static_cast<int64_t>(got) == expected, ErrorCode::kShapeMismatch, name,
               " must have length B * Hq * Sq = ", p.B, " * ", p.Hq, " * ", p.Sq, " = ", expected,
               ", got ", got);
}

}  // namespace

Problem validate_inputs(const AttentionInputs& in, const AttentionParams& params, RngState rng,
                        const KernelOptions& options) {
  Problem p;
  fill_problem(in, params, rng, options, p);
  return p;
}

ForwardProblem validate_forward(const AttentionInputs& in, const AttentionParams& params,
                                RngState rng, View out, std::span<float> lse,
                                const SoftmaxCarry& carry, const KernelOptions& options) {
  ForwardProblem p;
  fill_problem(in, params, rng, options, p);
  check_view(out, "out", "[B, Sq, Hq, Dv]", {p.B, p.Sq, p.Hq, p.Dv});
  check_no_self_overlap(out, "out");
  check_output_dtype(out, "out", p.dtype);
  check_row_stats(lse.size(), p, "lse");
  // Empty carry spans are an ordinary call; a carry that resumes or stops short needs both.
  const bool has_carry =
      carry.resume || !carry.finish || !carry.row_max.empty() || !carry.row_sum.empty();
  if (has_carry) {
    check_row_stats(carry.row_max.size(), p, "SoftmaxCarry.row_max");
    check_row_stats(carry.row_sum.size(), p, "SoftmaxCarry.row_sum");
    // Between calls out holds the unnormalised accumulator O, which is never rounded.
    CPATTN_CHECK(out.dtype == DType::kF32 || (!carry.resume && carry.finish),
                 ErrorCode::kInvalidArgument,
                 "out must be fp32 when a SoftmaxCarry resumes or does not finish (it holds the "
                 "fp32 accumulator), got ",
                 dtype_name(out.dtype));
    p.row_max = carry.row_max;
    p.row_sum = carry.row_sum;
    p.resume = carry.resume;
    p.finish = carry.finish;
  }
  p.out = out;
  p.lse = lse;
  return p;
}

void validate_delta(ConstView dout, ConstView out, std::span<float> delta) {
  check_readable(dout, "dout");
  check_view(out, "out", "[B, Sq, Hq, Dv] (the shape of dout)", dout.shape);
  check_output_dtype(out, "out", dout.dtype);
  const int64_t rows = dout.shape[0] * dout.shape[1] * dout.shape[2];
  CPATTN_CHECK(static_cast<int64_t>(delta.size()) == rows, ErrorCode::kShapeMismatch,
               "delta must have length B * Hq * Sq = ", rows, ", got ", delta.size());
}

BackwardProblem validate_backward(const AttentionInputs& in, const AttentionParams& params,
                                  RngState rng, ConstView dout, ConstView out,
                                  std::span<const float> lse, View dq, View dk, View dv,
                                  const BackwardOptions& options) {
  BackwardProblem p;
  fill_problem(in, params, rng, options.kernel, p);
  check_view(dout, "dout", "[B, Sq, Hq, Dv]", {p.B, p.Sq, p.Hq, p.Dv});
  check_view(out, "out", "[B, Sq, Hq, Dv]", {p.B, p.Sq, p.Hq, p.Dv});
  check_row_stats(lse.size(), p, "lse");
  // An empty delta means "compute it from dout and out"; a given one must cover every row.
  if (!options.delta.empty()) check_row_stats(options.delta.size(), p, "delta");
  check_view(dq, "dq", "[B, Sq, Hq, Dqk]", {p.B, p.Sq, p.Hq, p.Dqk});
  check_view(dk, "dk", "[B, Sk, Hkv, Dqk]", {p.B, p.Sk, p.Hkv, p.Dqk});
  check_view(dv, "dv", "[B, Sk, Hkv, Dv]", {p.B, p.Sk, p.Hkv, p.Dv});
  check_no_self_overlap(dq, "dq");
  check_no_self_overlap(dk, "dk");
  check_no_self_overlap(dv, "dv");
  check_input_dtype(dout, "dout", p.dtype);
  check_output_dtype(out, "out", p.dtype);
  check_output_dtype(dq, "dq", p.dtype);
  check_output_dtype(dk, "dk", p.dtype);
  check_output_dtype(dv, "dv", p.dtype);
  p.dout = dout;
  p.out = out;
  p.lse = lse;
  p.delta = options.delta;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.accumulate = options.accumulate;
  p.overwrite_dkdv = options.overwrite_dkdv;
  if (!options.dsink.empty()) {
    CPATTN_CHECK(!p.sink.empty(), ErrorCode::kInvalidArgument,
                 "dsink was given but params.sink is empty (no sink to differentiate)");
    CPATTN_CHECK(static_cast<int64_t>(options.dsink.size()) == p.dropout_heads,
                 ErrorCode::kShapeMismatch,
                 "dsink must have one value per query head of the call, Hq = ", p.dropout_heads,
                 ", got ", options.dsink.size());
    p.dsink = options.dsink;
  }
  if (options.before_dkdv) p.before_dkdv = &options.before_dkdv;
  return p;
}

}  // namespace cpattn::detail
