// The extension module cpattn._cpattn: cpattn's safe attention API (attention_forward /
// attention_backward with explicit, checked forward state) for torch tensors, on one rank or over
// a torch.distributed ProcessGroup. The torch.library ops, their autograd, the RNG and the
// checkpoint guard are Python (python/cpattn/_ops.py); this file only converts arguments and
// results (the forward's Fingerprint travels as a uint8 tensor of its byte form).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <tuple>
#include <vector>

#include "bench_hooks.h"
#include "cpattn/attention.h"
#include "cpattn/cp_options.h"
#include "cpattn/error.h"
#include "cpattn/fingerprint.h"
#include "cpattn/layout.h"
#include "cpattn/thread_communicator.h"
#include "cpattn/varlen.h"
#include "cpattn/version.h"
#include "process_group_communicator.h"
#include "torch_views.h"

namespace py = pybind11;

namespace cpattn::torch_binding {
namespace {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// The int64 values of a 1-D integer CPU tensor (doc_ids, cu_seqlens: int32 or int64).
std::vector<int64_t> int64_values(const at::Tensor& t, const char* name) {
  CPATTN_CHECK((t.scalar_type() == at::kLong || t.scalar_type() == at::kInt) && t.dim() == 1 &&
                   t.device().is_cpu(),
               ErrorCode::kInvalidArgument, name, " must be a 1-D int32 or int64 CPU tensor, got ",
               t.dim(), "-D ", std::string(c10::toString(t.scalar_type())), " on ",
               t.device().str());
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// How one rank holds a sequence: the Python side's (layout, S, P, rank, document ids).
SequenceSharding sharding(const std::string& layout, int64_t seq_len, int cp_size, int cp_rank,
                          const std::optional<at::Tensor>& doc_ids) {
  SequenceSharding s = SequenceSharding::of(parse_layout(layout), seq_len, cp_size, cp_rank);
  if (doc_ids.has_value()) {
    s.docs = int64_values(*doc_ids, "doc_ids");
    CPATTN_CHECK(static_cast<int64_t>(s.docs.size()) == seq_len, ErrorCode::kShapeMismatch,
                 "doc_ids must be an int64 tensor of the whole sequence's length ", seq_len,
                 ", got ", s.docs.size(), " elements");
  }
  s.validate();
  return s;
}

// A 1-D float32 CPU tensor's values (a per-head parameter: sinks, ALiBi slopes); empty for None.
std::vector<float> per_head(const std::optional<at::Tensor>& t, const char* name) {
  if (!t.has_value()) return {};
  CPATTN_CHECK(t->scalar_type() == at::kFloat && t->dim() == 1 && t->device().is_cpu(),
               ErrorCode::kInvalidArgument, name,
               " must be a 1-dimensional float32 CPU tensor (one value per query head)");
  const at::Tensor c = t->detach().contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// Mask slices from an int64 CPU tensor [n, 5]: (q_begin, q_end, k_begin, k_end, type code of
// SliceType: 0 full, 1 causal, 2 inv_causal, 3 bi_causal); empty for None.
std::vector<MaskSlice> slices_of(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return {};
  CPATTN_CHECK(
      t->scalar_type() == at::kLong && t->dim() == 2 && t->size(1) == 5 && t->device().is_cpu(),
      ErrorCode::kInvalidArgument,
      "slices must be an int64 CPU tensor [n, 5] (q_begin, q_end, k_begin, k_end, type)");
  const at::Tensor c = t->contiguous();
  const int64_t* x = c.data_ptr<int64_t>();
  std::vector<MaskSlice> slices;
  for (int64_t i = 0; i < c.size(0); ++i, x += 5) {
    CPATTN_CHECK(x[4] >= 0 && x[4] <= 3, ErrorCode::kInvalidArgument, "slice ", i,
                 " has type code ", x[4], " (0 full, 1 causal, 2 inv_causal, 3 bi_causal)");
    slices.push_back({x[0], x[1], x[2], x[3], static_cast<SliceType>(x[4])});
  }
  return slices;
}

// The q and kv shardings of a varlen call (varlen_shardings): the whole sequence's cu_seqlens
// and token counts.
VarlenShardings varlen_sharding(const std::string& layout, const at::Tensor& cu_seqlens_q,
                                const at::Tensor& cu_seqlens_k, int64_t total_q, int64_t total_k,
                                int cp_size, int cp_rank) {
  const std::vector<int64_t> cu_q = int64_values(cu_seqlens_q, "cu_seqlens_q");
  const std::vector<int64_t> cu_k = int64_values(cu_seqlens_k, "cu_seqlens_k");
  return varlen_shardings(parse_layout(layout), cu_q, cu_k, total_q, total_k, cp_size, cp_rank);
}

// flash-attn's max_seqlen bounds of a varlen call, against its (checked) cu_seqlens.
void check_max_seqlen(const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                      int64_t max_seqlen_q, int64_t max_seqlen_k) {
  check_varlen_max_seqlen(int64_values(cu_seqlens_q, "cu_seqlens_q"),
                          int64_values(cu_seqlens_k, "cu_seqlens_k"), max_seqlen_q, max_seqlen_k);
}

// The ErrorCode whose error_code_name is `name` (kInvalidArgument for a name cpattn does not
// have: the Python wrappers' own refusals are invalid arguments or shape mismatches).
ErrorCode error_code_of(const std::string& name) {
  for (int c = 1; c <= static_cast<int>(ErrorCode::kInterrupted); ++c) {
    if (name == error_code_name(static_cast<ErrorCode>(c))) return static_cast<ErrorCode>(c);
  }
  return ErrorCode::kInvalidArgument;
}

// The CP group a call runs on: the ProcessGroup, or one rank of its own, with the deadline
// timeout_s (checked: timeout_of_seconds).
std::unique_ptr<Communicator> group_of(const std::optional<ProcessGroupPtr>& group,
                                       double timeout_s, uint64_t call_number) {
  const std::chrono::milliseconds timeout = timeout_of_seconds(timeout_s, "timeout");
  std::unique_ptr<Communicator> comm;
  if (group.has_value() && *group) {
    comm = std::make_unique<ProcessGroupCommunicator>(*group, timeout);
  } else {
    comm = std::make_unique<SingleRankCommunicator>();
    comm->set_timeout(timeout);
  }
  set_next_call_number(*comm, call_number);
  return comm;
}

// Everything one call needs besides its tensors: the Python op's arguments (cpattn/_ops.py),
// built once per op call.
struct Call {
  SequenceSharding q_seq, kv_seq;
  AttentionParams params;
  std::optional<ProcessGroupPtr> group;
  double timeout_s = 300.0;
  int num_threads = 1;
  Strategy strategy{};
  /// The caller's cpattn.Workspace (None: every call allocates its scratch).
  std::shared_ptr<AttentionWorkspace> workspace;
  /// Where the Python caller made the call ("model.py:42" or a name it gave): the call site of
  /// the forward and of its backward (CpOptions::call_site).
  std::string call_site;

  CpOptions options() const {
    CpOptions o;
    // Each rank's own share of the sinks' gradient: PyTorch training loops sum every
    // parameter's gradient over the CP group themselves.
    o.reduce_dsink = false;
    o.num_threads = num_threads;
    o.strategy = strategy;
    o.workspace = workspace.get();
    o.call_site = call_site;
    return o;
  }
};

// The unsigned 64-bit words of an int64 CPU tensor of `n` elements (the RngState [seed, offset],
// the call number [n]): torch has no uint64, so the words travel as their two's-complement int64.
std::array<uint64_t, 2> words_of(const at::Tensor& t, int64_t n, const char* name) {
  CPATTN_CHECK(
      t.scalar_type() == at::kLong && t.dim() == 1 && t.numel() == n && t.device().is_cpu(),
      ErrorCode::kInvalidArgument, name, " must be an int64 CPU tensor of ", n, " elements");
  const at::Tensor c = t.contiguous();
  std::array<uint64_t, 2> w{};
  for (int64_t i = 0; i < n; ++i)
    w[static_cast<size_t>(i)] = static_cast<uint64_t>(c[i].item<int64_t>());
  return w;
}

RngState rng_of(const at::Tensor& rng) {
  const auto w = words_of(rng, 2, "rng");
  return {w[0], w[1]};
}

// A Python float argument as the float32 the C++ call takes, refused (kInvalidArgument) when
// float32 cannot hold it: a nonzero value that would round to 0 (a softcap or dropout_p of 1e-50
// would silently turn the feature off) or a finite one that would overflow. NaN and infinities
// pass through to the call's own checks.
float float_param(double x, const char* name) {
  const float f = static_cast<float>(x);
  CPATTN_CHECK(!(x != 0.0 && f == 0.0f) && !(std::isfinite(x) && !std::isfinite(f)),
               ErrorCode::kInvalidArgument, name, " = ", x,
               " is not representable in float32 (it would round to ", f, ")");
  return f;
}

uint64_t call_number_of(const at::Tensor& call_number) {
  return words_of(call_number, 1, "call_number")[0];
}

// A forward's Fingerprint as a uint8 tensor of kFingerprintBytes (fingerprint_bytes), and back.
at::Tensor fingerprint_tensor(const Fingerprint& f) {
  const auto bytes = fingerprint_bytes(f);
  at::Tensor t =
      at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
  std::copy(bytes.begin(), bytes.end(), t.data_ptr<uint8_t>());
  return t;
}

Fingerprint fingerprint_of(const at::Tensor& t) {
  CPATTN_CHECK(t.scalar_type() == at::kByte && t.dim() == 1 && t.device().is_cpu(),
               ErrorCode::kInvalidArgument,
               "fingerprint must be the uint8 CPU tensor the forward returned");
  const at::Tensor c = t.contiguous();
  return fingerprint_from_bytes(
      std::span<const uint8_t>(c.data_ptr<uint8_t>(), static_cast<size_t>(c.numel())));
}

// The views of a call's tensors, or, when one cannot be read (a dtype or rank cpattn does not
// take) or the views' own checks throw, the refusal of the call in the group's agreement
// (refuse_attention_call), so that the other ranks raise at once instead of waiting for it.
template <typename Views>
auto views_or_refuse(const Call& call, uint64_t call_number, RefusedCall kind, Views&& views) {
  try {
    return views();
  } catch (const Error& e) {
    const py::gil_scoped_release released;
    const auto comm = group_of(call.group, call.timeout_s, call_number);
    refuse_attention_call(*comm, e, kind, call.options());
  }
}

py::tuple forward(const Call& call, const at::Tensor& call_number_t, const at::Tensor& q,
                  const at::Tensor& k, const at::Tensor& v, const at::Tensor& rng_t,
                  bool for_backward) {
  const uint64_t call_number = call_number_of(call_number_t);
  const auto [qv, kv, vv, rng] = views_or_refuse(call, call_number, RefusedCall::kForward, [&] {
    return std::make_tuple(view_of(q, "q"), view_of(k, "k"), view_of(v, "v"), rng_of(rng_t));
  });
  std::shared_ptr<ForwardResult> state;
  {
    const py::gil_scoped_release released;
    const auto comm = group_of(call.group, call.timeout_s, call_number);
    CpOptions options = call.options();
    options.for_backward = for_backward;
    state = std::make_shared<ForwardResult>(
        attention_forward(*comm, qv, kv, vv, call.q_seq, call.kv_seq, call.params, rng, options));
  }
  // out and lse are torch tensors over the ForwardResult's buffers: the state lives as long as
  // either of them (saved by autograd for backward, or held by the caller).
  at::Tensor out = torch_over(state, state->out.data(), state->out.shape(), state->out.dtype());
  at::Tensor lse = torch_over(state, state->lse.data(), state->lse.shape());
  return py::make_tuple(out, lse, fingerprint_tensor(state->fingerprint),
                        state->fingerprint.inputs_digest);
}

// Fingerprint::differences of `recorded` against `called` (brought by `caller`: "backward" or
// "recompute"), '; '-separated ("" when none; call numbers, which a recompute takes anew, are
// not compared).
std::string differences_text(const Fingerprint& recorded, const Fingerprint& called,
                             std::string_view caller) {
  std::string text;
  for (const std::string& d : recorded.differences(called, caller)) {
    text += (text.empty() ? "" : "; ") + d;
  }
  return text;
}

// Autograd keeps the first forward's fingerprint (`first`) on its context, while out, lse and
// rng are saved tensors, which activation checkpointing drops and recomputes: `computed_by` is
// the fingerprint of the run that computed them. A recompute with another softcap, scale, mask,
// dropout_p or other inputs than the first forward would give the gradients of another function
// than the loss's: Error(kRecomputeDiverged) naming each difference.
void check_recompute(const Fingerprint& first, const Fingerprint& computed_by) {
  // The state was produced by the recompute; the backward is called with the first's arguments.
  const std::string diffs = differences_text(computed_by, first, "backward");
  CPATTN_CHECK(diffs.empty(), ErrorCode::kRecomputeDiverged,
               "recompute diverged: out/lse were recomputed (activation checkpointing) by a call "
               "that differs from the forward the loss came from, whose arguments the backward "
               "takes: ",
               diffs);
}

py::tuple backward(const Call& call, const at::Tensor& call_number_t, const at::Tensor& dout,
                   const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& out, const at::Tensor& lse, const at::Tensor& rng_t,
                   const at::Tensor& fingerprint_t, const at::Tensor& state_fingerprint_t) {
  const uint64_t call_number = call_number_of(call_number_t);
  const auto [dv, qv, kv, vv, outv, lsev, rng,
              fingerprint] = views_or_refuse(call, call_number, RefusedCall::kBackward, [&] {
    const Fingerprint first = fingerprint_of(fingerprint_t);
    check_recompute(first, fingerprint_of(state_fingerprint_t));
    return std::make_tuple(view_of(dout, "dout"), view_of(q, "q"), view_of(k, "k"), view_of(v, "v"),
                           view_of(out, "out"), floats_of(lse, "lse", 3), rng_of(rng_t), first);
  });
  const ForwardStateView state{outv, lsev, rng, fingerprint};
  AttentionGradients g;
  {
    const py::gil_scoped_release released;
    const auto comm = group_of(call.group, call.timeout_s, call_number);
    // The forward whose output the loss was computed from is the one whose fingerprint autograd
    // kept; the saved out/lse may come from a recompute, and must match it.
    g = attention_backward(*comm, dv, qv, kv, vv, state, call.q_seq, call.kv_seq, call.params,
                           fingerprint.rng, call.options());
  }
  // dsink: float32 [Hq], or [0] for a call without sinks (an op's outputs are always tensors).
  at::Tensor dsink = call.params.sink.empty()
                         ? at::empty({0}, at::TensorOptions().dtype(at::kFloat))
                         : torch_from(std::move(g.dsink));
  return py::make_tuple(torch_from(std::move(g.dq)), torch_from(std::move(g.dk)),
                        torch_from(std::move(g.dv)), dsink);
}

}  // namespace
}  // namespace cpattn::torch_binding

PYBIND11_MODULE(_cpattn, m) {
  namespace tb = cpattn::torch_binding;
  m.doc() = "cpattn's C++ engine for torch tensors (use the cpattn package, not this module)";

  // cpattn::Error -> cpattn.Error (a RuntimeError) carrying the error code's name in .code.
  static py::exception<cpattn::Error> error_type(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const cpattn::Error& e) {
      py::object instance = py::handle(error_type.ptr())(e.what());
      instance.attr("code") = cpattn::error_code_name(e.code());
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });

  py::class_<cpattn::AttentionWorkspace, std::shared_ptr<cpattn::AttentionWorkspace>>(
      m, "Workspace",
      "Reusable scratch buffers for ring_attention calls (cpattn::AttentionWorkspace, "
      "workspace.h): "
      "pass one to every call of a training loop (one call at a time) and only the first call "
      "faults its memory in. It holds no results and no state.")
      .def(py::init([] { return std::make_shared<cpattn::AttentionWorkspace>(); }))
      .def_property_readonly("bytes", &cpattn::AttentionWorkspace::bytes,
                             "Bytes held now (charged to cpattn.memory_stats())")
      .def(
          "release",
          [](cpattn::AttentionWorkspace& w) {
            const py::gil_scoped_release released;
            w.release();
          },
          "Frees every buffer; raises cpattn.Error while a call uses the workspace");

  py::class_<tb::Call>(m, "Call", "The non-tensor arguments of one attention call")
      .def(py::init([](std::optional<tb::ProcessGroupPtr> group, const std::string& layout,
                       int64_t seq_len, std::optional<int64_t> kv_seq_len,
                       std::optional<at::Tensor> doc_ids, std::optional<at::Tensor> cu_seqlens_q,
                       std::optional<at::Tensor> cu_seqlens_k, std::optional<double> softmax_scale,
                       bool causal, int64_t window_left, int64_t window_right, double dropout_p,
                       double softcap, std::optional<at::Tensor> alibi_slopes,
                       std::optional<at::Tensor> sink, std::optional<at::Tensor> slices,
                       double timeout, int num_threads, const std::string& strategy,
                       std::shared_ptr<cpattn::AttentionWorkspace> workspace,
                       const std::string& call_site, int64_t max_seqlen_q, int64_t max_seqlen_k) {
             const bool grouped = group.has_value() && *group;
             const int cp_size = grouped ? (*group)->getSize() : 1;
             const int cp_rank = grouped ? (*group)->getRank() : 0;
             tb::Call c;
             CPATTN_CHECK(cu_seqlens_q.has_value() == cu_seqlens_k.has_value(),
                          cpattn::ErrorCode::kInvalidArgument,
                          "cu_seqlens_q and cu_seqlens_k are given together or not at all");
             if (cu_seqlens_q.has_value()) {
               CPATTN_CHECK(!doc_ids.has_value(), cpattn::ErrorCode::kInvalidArgument,
                            "a varlen call (cu_seqlens) takes no doc_ids: its documents are "
                            "the cu_seqlens'");
               cpattn::VarlenShardings v =
                   tb::varlen_sharding(layout, *cu_seqlens_q, *cu_seqlens_k, seq_len,
                                       kv_seq_len.value_or(seq_len), cp_size, cp_rank);
               c.q_seq = std::move(v.q);
               c.kv_seq = std::move(v.kv);
               tb::check_max_seqlen(*cu_seqlens_q, *cu_seqlens_k, max_seqlen_q, max_seqlen_k);
             } else {
               CPATTN_CHECK(max_seqlen_q < 0 && max_seqlen_k < 0,
                            cpattn::ErrorCode::kInvalidArgument,
                            "max_seqlen_q / max_seqlen_k belong to a varlen call (cu_seqlens)");
               c.q_seq = tb::sharding(layout, seq_len, cp_size, cp_rank, doc_ids);
               c.kv_seq = kv_seq_len.has_value()
                              ? tb::sharding(layout, *kv_seq_len, cp_size, cp_rank, doc_ids)
                              : c.q_seq;
             }
             if (softmax_scale.has_value()) {
               c.params.softmax_scale = tb::float_param(*softmax_scale, "softmax_scale");
             }
             c.params.causal = causal;
             c.params.window_left = window_left;
             c.params.window_right = window_right;
             c.params.dropout_p = tb::float_param(dropout_p, "dropout_p");
             c.params.softcap = tb::float_param(softcap, "softcap");
             c.params.alibi_slopes = tb::per_head(alibi_slopes, "alibi_slopes");
             c.params.sink = tb::per_head(sink, "sink");
             c.params.slices = tb::slices_of(slices);
             c.group = std::move(group);
             c.timeout_s = timeout;
             c.num_threads = num_threads;
             c.strategy = cpattn::parse_strategy(strategy);
             c.workspace = std::move(workspace);
             c.call_site = call_site;
             return c;
           }),
           py::kw_only(), py::arg("group"), py::arg("layout"), py::arg("seq_len"),
           py::arg("kv_seq_len"), py::arg("doc_ids"), py::arg("cu_seqlens_q"),
           py::arg("cu_seqlens_k"), py::arg("softmax_scale"), py::arg("causal"),
           py::arg("window_left"), py::arg("window_right"), py::arg("dropout_p"),
           py::arg("softcap"), py::arg("alibi_slopes"), py::arg("sink"), py::arg("slices"),
           py::arg("timeout"), py::arg("num_threads"), py::arg("strategy"), py::arg("workspace"),
           py::arg("call_site"), py::arg("max_seqlen_q"), py::arg("max_seqlen_k"),
           "group: the CP group (None: one rank); layout ('zigzag', 'striped', 'contiguous', "
           "'doc_zigzag') and seq_len: the whole sequence's split (kv_seq_len: the keys' length "
           "when it differs); doc_ids: int64 [seq_len] or None; cu_seqlens_q / cu_seqlens_k: "
           "a varlen call's whole-sequence cumulative document lengths (int64) or None, and "
           "max_seqlen_q / max_seqlen_k its flash-attn bounds (-1 for other calls); the "
           "attention parameters (AttentionParams; alibi_slopes and sink float32 [Hq] or None, "
           "slices int64 [n, 5] or None); timeout in seconds; strategy as "
           "parse_strategy reads it; workspace: a Workspace or None; call_site: the caller's name "
           "for the call in errors")
      .def("local_length", [](const tb::Call& c) { return c.q_seq.local_length(); });

  m.attr("FINGERPRINT_BYTES") = cpattn::kFingerprintBytes;
  m.def("forward", &tb::forward, py::arg("call"), py::arg("call_number"), py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("rng"), py::arg("for_backward"),
        "attention_forward: (out [B, S_r, Hq, Dv], lse fp32 [B, Hq, S_r], fingerprint uint8 "
        "[FINGERPRINT_BYTES], inputs_digest); call_number int64 [1], rng int64 [2] (seed, "
        "offset); for_backward: CpOptions::for_backward (False: q/k/v are not digested, "
        "inputs_digest is 0, and no backward accepts the state)");
  m.def(
      "recompute_differences",
      [](const at::Tensor& first, const at::Tensor& recomputed) {
        return tb::differences_text(tb::fingerprint_of(first), tb::fingerprint_of(recomputed),
                                    "recompute");
      },
      py::arg("first"), py::arg("recomputed"),
      "how the fingerprint tensor of a recomputed forward differs from its first forward's, as "
      "C++ recompute_forward words it ('ForwardResult was produced with <first>, backward called "
      "with <recomputed>', '; '-separated; '' when it does not; call numbers not compared)");
  m.def("backward", &tb::backward, py::arg("call"), py::arg("call_number"), py::arg("dout"),
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("rng"),
        py::arg("fingerprint"), py::arg("state_fingerprint"),
        "attention_backward from a ForwardStateView (out, lse, rng, the forward's fingerprint "
        "tensor; state_fingerprint: the fingerprint of the run that computed out, lse and rng, "
        "which must not differ from it): (dq, dk, dv, dsink) (dsink float32 [Hq], empty "
        "without sinks)");
  m.def(
      "refuse",
      [](std::optional<tb::ProcessGroupPtr> group, double timeout_s, uint64_t call_number,
         const std::string& code, const std::string& message, const std::string& call_site,
         bool backward) {
        const cpattn::Error reason(tb::error_code_of(code), message);
        const py::gil_scoped_release released;
        const auto comm = tb::group_of(group, timeout_s, call_number);
        cpattn::CpOptions options;
        options.call_site = call_site;
        cpattn::refuse_attention_call(
            *comm, reason,
            backward ? cpattn::RefusedCall::kBackward : cpattn::RefusedCall::kForward, options);
      },
      py::arg("group"), py::arg("timeout"), py::arg("call_number"), py::arg("code"),
      py::arg("message"), py::arg("call_site"), py::arg("backward"),
      "refuse_attention_call: this rank's wrapper refuses a call (code: an error code's name); "
      "raises cpattn.Error with that code and message after the group's agreement");
  m.def(
      "check_timeout", [](double timeout_s) { cpattn::timeout_of_seconds(timeout_s, "timeout"); },
      py::arg("timeout"),
      "raises cpattn.Error (invalid_argument) unless `timeout` is a deadline every call takes "
      "(timeout_of_seconds: finite, in [0.001, 1e6] s)");
  m.def(
      "shard_token_indices",
      [](const std::string& layout, int64_t seq_len, int cp_size, int rank,
         std::optional<at::Tensor> doc_ids, std::optional<at::Tensor> cu_seqlens) {
        CPATTN_CHECK(!(doc_ids.has_value() && cu_seqlens.has_value()),
                     cpattn::ErrorCode::kInvalidArgument,
                     "pass doc_ids or cu_seqlens (the documents), not both");
        if (cu_seqlens.has_value()) {
          doc_ids = at::tensor(cpattn::varlen_doc_ids(tb::int64_values(*cu_seqlens, "cu_seqlens"),
                                                      seq_len, "cu_seqlens", "the sequence"),
                               at::kLong);
        }
        const cpattn::SequenceSharding seq = tb::sharding(layout, seq_len, cp_size, rank, doc_ids);
        return at::tensor(cpattn::shard_token_indices(seq, rank), at::kLong);
      },
      py::arg("layout"), py::arg("seq_len"), py::arg("cp_size"), py::arg("rank"),
      py::arg("doc_ids") = py::none(), py::arg("cu_seqlens") = py::none(),
      "Global token indices rank `rank` holds, in local order, of a sequence of seq_len tokens "
      "whose documents are doc_ids (int64 [seq_len]) or cu_seqlens (flash-attn's cumulative "
      "lengths), or one document");
  m.def(
      "memory_stats",
      [] {
        const cpattn::StateMemoryStats s = cpattn::memory_stats();
        py::dict d;
        d["live_bytes"] = s.live_bytes;
        d["peak_bytes"] = s.peak_bytes;
        d["live_forward_results"] = s.live_forward_results;
        d["peak_forward_results"] = s.peak_forward_results;
        return d;
      },
      "Bytes cpattn holds (live, peak) and ForwardResults alive in this process");
  m.def(
      "_time_kernel",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
         bool causal, int threads) {
        const py::gil_scoped_release released;
        return tb::time_kernel(q, k, v, dout, causal, threads);
      },
      "Benchmark hook: seconds of the C++ kernel's forward + backward on these tensors");
  m.def(
      "_time_inprocess_ring",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
         int cp_size, bool causal) {
        const py::gil_scoped_release released;
        return tb::time_inprocess_ring(q, k, v, dout, cp_size, causal);
      },
      "Benchmark hook: seconds of a checked forward + backward over in-process ranks");
  m.def("library_version", [] { return std::string(cpattn::library_version()); });
  m.def(
      "allreduce_sum",
      [](tb::ProcessGroupPtr group, at::Tensor x, double timeout_s) {
        CPATTN_CHECK(x.scalar_type() == at::kDouble && x.is_contiguous() && x.device().is_cpu(),
                     cpattn::ErrorCode::kInvalidArgument,
                     "allreduce_sum takes a contiguous float64 CPU tensor");
        const py::gil_scoped_release released;
        const auto comm = tb::group_of(group, timeout_s, 0);
        comm->allreduce_sum(
            std::span<double>(x.data_ptr<double>(), static_cast<size_t>(x.numel())));
      },
      py::arg("group"), py::arg("x"), py::arg("timeout"),
      "cpattn's fixed-order sum over the group, in place (bitwise equal on every rank)");
  m.def(
      "all_gather",
      [](tb::ProcessGroupPtr group, const at::Tensor& x, double timeout_s) {
        CPATTN_CHECK(x.is_contiguous() && x.device().is_cpu(), cpattn::ErrorCode::kInvalidArgument,
                     "all_gather takes a contiguous CPU tensor");
        const auto comm = tb::group_of(group, timeout_s, 0);
        const auto p = static_cast<size_t>(comm->size());
        std::vector<int64_t> shape{comm->size()};
        shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
        at::Tensor all = at::empty(shape, x.options());
        const auto* mine = static_cast<const std::byte*>(x.data_ptr());
        const size_t bytes = x.nbytes();
        std::vector<std::byte> send(bytes * p);
        for (size_t r = 0; r < p; ++r) std::copy(mine, mine + bytes, send.data() + r * bytes);
        const py::gil_scoped_release released;
        comm->all_to_all(send,
                         std::span<std::byte>(static_cast<std::byte*>(all.data_ptr()), bytes * p));
        return all;
      },
      py::arg("group"), py::arg("x"), py::arg("timeout"),
      "every rank's x (the same shape and dtype on every rank), stacked in rank order: "
      "[P, *x.shape], under the deadline `timeout` (s)");
}
