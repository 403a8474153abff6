// attention_forward / attention_backward: a CP strategy plus explicit, checked forward state.
#include "cpattn/attention.h"

#include <optional>
#include <utility>

#include "cpattn/detail/cp.h"
#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "state/call_agreement.h"
#include "state/state_detail.h"

namespace cpattn {

ForwardResult::ForwardResult(Tensor out_in, Tensor lse_in, RngState rng_in, Fingerprint fp,
                             MemoryCounter& counter)
    : out(std::move(out_in)),
      lse(std::move(lse_in)),
      rng(rng_in),
      fingerprint(std::move(fp)),
      counter_(counter.shared_from_this()) {
  counter_->add_objects(1);
}

ForwardResult::ForwardResult(ForwardResult&& other) noexcept
    : out(std::move(other.out)),
      lse(std::move(other.lse)),
      rng(other.rng),
      fingerprint(std::move(other.fingerprint)),
      counter_(std::move(other.counter_)) {}

ForwardResult& ForwardResult::operator=(ForwardResult&& other) noexcept {
  if (this != &other) {
    if (counter_ != nullptr) counter_->add_objects(-1);
    out = std::move(other.out);
    lse = std::move(other.lse);
    rng = other.rng;
    fingerprint = std::move(other.fingerprint);
    counter_ = std::move(other.counter_);
  }
  return *this;
}

ForwardResult::~ForwardResult() {
  if (counter_ != nullptr) counter_->add_objects(-1);
}

ForwardStateView ForwardResult::view() const { return {out.view(), lse.span(), rng, fingerprint}; }

StateMemoryStats memory_stats(const MemoryCounter& counter) {
  // ForwardResults are the only objects the library registers (ForwardResult's constructor).
  const MemoryStats s = counter.stats();
  return {s.live_bytes, s.peak_bytes, s.live_objects, s.peak_objects};
}

void set_next_call_number(Communicator& comm, uint64_t next) {
  comm.layer_state<detail::CallNumbering>().next = next;
}

namespace detail {

uint64_t outputs_digest(ConstView out, std::span<const float> lse, int num_threads) {
  return Digest().view(out, num_threads).values(lse).finish();
}

std::string join_differences(std::string_view prefix, const std::vector<std::string>& diffs) {
  std::string message(prefix);
  for (size_t i = 0; i < diffs.size(); ++i) message += (i ? "; " : "") + diffs[i];
  return message;
}

std::optional<Fingerprint> fingerprint_or_refusal(
    const Communicator& comm, ConstView q, ConstView k, ConstView v, const SequenceSharding& q_seq,
    const SequenceSharding& kv_seq, const AttentionParams& params, RngState rng,
    const CpOptions& options, bool digest_inputs, std::optional<Error>& refusal) {
  try {
    return make_fingerprint(comm.rank(), comm.size(), q, k, v, q_seq, kv_seq, params, rng,
                            options.strategy, options.isa, options.num_threads, digest_inputs);
  } catch (const Error& e) {
    if (!refusal) refusal = e;
  }
  return std::nullopt;
}

std::optional<CpCall> validated_or_refusal(Communicator& comm, ConstView q, ConstView k,
                                           ConstView v, const SequenceSharding& q_seq,
                                           const SequenceSharding& kv_seq,
                                           const AttentionParams& params, RngState rng,
                                           const CpOptions& options,
                                           std::optional<Error>& refusal) {
  if (refusal) return std::nullopt;
  try {
    return validate_cp_call(comm, q, k, v, q_seq, kv_seq, params, rng, options);
  } catch (const Error& e) {
    refusal = e;
  }
  return std::nullopt;
}

ForwardResult checked_forward(Communicator& comm, CallOp op, ConstView q, ConstView k, ConstView v,
                              const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                              const AttentionParams& params, RngState rng, const CpOptions& options,
                              std::string_view call_site, std::optional<Fingerprint> fp,
                              std::optional<Error> local_error) {
  const std::optional<CpCall> call =
      validated_or_refusal(comm, q, k, v, q_seq, kv_seq, params, rng, options, local_error);
  const uint64_t number =
      agree_or_throw(comm, op, fp ? &*fp : nullptr, options, call_site, std::nullopt, local_error);
  CPATTN_CHECK(fp.has_value() && call.has_value(), ErrorCode::kInternal,
               "a checked forward without a fingerprint or a validated call");
  fp->call_number = number;
  CpForwardResult r = cp_forward(*call);
  if (fp->inputs_digest != kInputsNotDigested) {
    fp->outputs_digest = outputs_digest(r.out.view(), r.lse.span(), options.num_threads);
  }
  return ForwardResult(std::move(r.out), std::move(r.lse), r.rng, std::move(*fp), comm.memory());
}

AttentionGradients checked_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                    ConstView v, const ForwardStateView& state,
                                    const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                    const AttentionParams& params, const CpOptions& options,
                                    std::string_view call_site, const Fingerprint* called,
                                    std::optional<Error> local_error) {
  const std::optional<CpCall> call =
      validated_or_refusal(comm, q, k, v, q_seq, kv_seq, params, state.rng, options, local_error);
  const BackwardState backward_state{dout, state.out, state.lse};
  if (!local_error) {  // what only a backward reads: dout, out, lse
    try {
      check_backward_state(*call, backward_state);
    } catch (const Error& e) {
      local_error = e;
    }
  }
  agree_or_throw(comm, CallOp::kBackward, called, options, call_site, state.fingerprint.call_number,
                 local_error);
  CPATTN_CHECK(call.has_value(), ErrorCode::kInternal,
               "a checked backward without a validated call");
  return cp_backward(*call, backward_state);
}

}  // namespace detail

ForwardResult attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                const AttentionParams& params, RngState rng,
                                const CpOptions& options, SourceLocation caller) {
  std::optional<Error> refusal;
  std::optional<Fingerprint> fp = detail::fingerprint_or_refusal(
      comm, q, k, v, q_seq, kv_seq, params, rng, options, options.for_backward, refusal);
  return detail::checked_forward(comm, detail::CallOp::kForward, q, k, v, q_seq, kv_seq, params,
                                 rng, options, detail::call_site_text(options.call_site, caller),
                                 std::move(fp), std::move(refusal));
}

namespace {

// Everything that makes `state` unusable for this backward, as one message (nullopt: nothing).
// Digests state.out and state.lse on up to `num_threads` threads when all else matches.
std::optional<Error> state_error(ConstView dout, ConstView q, ConstView k, ConstView v,
                                 const ForwardStateView& state, const Fingerprint& called,
                                 int num_threads) {
  std::vector<std::string> diffs = state.fingerprint.differences(called);
  if (state.rng != state.fingerprint.rng) {
    diffs.push_back(detail::str_cat("its out/lse were computed with rng=", to_string(state.rng),
                                    ", not the forward's rng=", to_string(state.fingerprint.rng),
                                    " (recomputed with other dropout?)"));
  }
  const AttentionDims d = attention_dims(q, k, v);
  const std::array<int64_t, 4> out_shape = {d.B, d.Sq, d.Hq, d.Dv};
  if (state.out.shape != out_shape) {
    diffs.push_back(detail::str_cat("its out has shape ", shape_string(state.out.shape),
                                    ", this call's out is ", shape_string(out_shape)));
  }
  if (state.out.dtype != q.dtype) {  // the checked forward returns out in q's dtype
    diffs.push_back(detail::str_cat("its out is ", dtype_name(state.out.dtype),
                                    ", the forward returned it in q's dtype ", dtype_name(q.dtype),
                                    " (hand backward that out)"));
  }
  const int64_t lse_len = d.B * d.Hq * d.Sq;
  if (static_cast<int64_t>(state.lse.size()) != lse_len) {
    diffs.push_back(detail::str_cat("its lse has ", state.lse.size(),
                                    " floats, this call's has B * Hq * Sq_r = ", lse_len));
  }
  if (diffs.empty()) {
    try {
      check_view(dout, "dout", "[B, Sq_local, Hq, Dv]", out_shape);
      check_view(state.out, "out", "[B, Sq_local, Hq, Dv]", out_shape);  // before it is read
    } catch (const Error& e) {
      return e;
    }
    // The fingerprint matched, so the forward digested its inputs and recorded outputs_digest.
    const uint64_t now = detail::outputs_digest(state.out, state.lse, num_threads);
    if (now == state.fingerprint.outputs_digest) return std::nullopt;
    return Error(ErrorCode::kStateMismatch,
                 detail::str_cat("attention_backward: the ForwardResult's out or lse changed "
                                 "after its forward (out/lse digest ",
                                 digest_hex(now), ", the forward's ",
                                 digest_hex(state.fingerprint.outputs_digest),
                                 "): backward needs them as the forward returned them (add a "
                                 "residual into a copy of out, not into out)"));
  }
  return Error(ErrorCode::kStateMismatch,
               detail::join_differences(
                   "attention_backward: the ForwardResult does not belong to this call: ", diffs));
}

// A checked backward whose call may already be refused (`refusal`): the fingerprint and the
// state's checks add their errors to it, and the call agreement carries the first one to every
// rank.
AttentionGradients backward_with_refusal(Communicator& comm, ConstView dout, ConstView q,
                                         ConstView k, ConstView v, const ForwardStateView& state,
                                         const SequenceSharding& q_seq,
                                         const SequenceSharding& kv_seq,
                                         const AttentionParams& params, RngState rng,
                                         const CpOptions& options, std::string_view call_site,
                                         std::optional<Error> refusal) {
  // `rng` is the caller's: a state from another forward on the same inputs differs in it.
  const std::optional<Fingerprint> called = detail::fingerprint_or_refusal(
      comm, q, k, v, q_seq, kv_seq, params, rng, options, true, refusal);
  if (!refusal) refusal = state_error(dout, q, k, v, state, *called, options.num_threads);
  return detail::checked_backward(comm, dout, q, k, v, state, q_seq, kv_seq, params, options,
                                  call_site, called ? &*called : nullptr, std::move(refusal));
}

}  // namespace

AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const ForwardStateView& state,
                                      const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                      const AttentionParams& params, RngState rng,
                                      const CpOptions& options, SourceLocation caller) {
  return backward_with_refusal(comm, dout, q, k, v, state, q_seq, kv_seq, params, rng, options,
                               detail::call_site_text(options.call_site, caller), std::nullopt);
}

AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const ForwardResult& state,
                                      const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                      const AttentionParams& params, RngState rng,
                                      const CpOptions& options, SourceLocation caller) {
  // A moved-from ForwardResult keeps its fingerprint (plain values) but no tensors.
  std::optional<Error> moved_from;
  if (state.out.shape().size() != 4 || state.lse.shape().size() != 3) {
    moved_from = Error(ErrorCode::kStateMismatch,
                       "attention_backward: the ForwardResult holds no out/lse tensors (it was "
                       "moved from)");
  }
  // Its view would throw before the agreement: the refusal travels with an empty one instead.
  const ForwardStateView view =
      moved_from ? ForwardStateView{ConstView{}, {}, state.rng, state.fingerprint} : state.view();
  return backward_with_refusal(comm, dout, q, k, v, view, q_seq, kv_seq, params, rng, options,
                               detail::call_site_text(options.call_site, caller),
                               std::move(moved_from));
}

void refuse_attention_call(Communicator& comm, const Error& reason, RefusedCall kind,
                           const CpOptions& options, SourceLocation caller) {
  const auto op =
      kind == RefusedCall::kForward ? detail::CallOp::kForward : detail::CallOp::kBackward;
  detail::agree_or_throw(comm, op, nullptr, options,
                         detail::call_site_text(options.call_site, caller), std::nullopt, reason);
  throw reason;  // agree_or_throw has thrown it already (a local error always throws)
}

}  // namespace cpattn
