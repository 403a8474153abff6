// attention_forward / attention_backward: the ring plus explicit, checked forward state.
#include "cpattn/attention.h"

#include <utility>

#include "cpattn/error.h"
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

StateMemoryStats memory_stats(const MemoryCounter& counter) {
  // ForwardResults are the only objects the library registers (ForwardResult's constructor).
  const MemoryStats s = counter.stats();
  return {s.live_bytes, s.peak_bytes, s.live_objects, s.peak_objects};
}

namespace detail {
namespace {
void check_group(const Communicator& comm, const SequenceSharding& seq, const char* name) {
  CPATTN_CHECK(seq.cp_size == comm.size() && seq.cp_rank == comm.rank(),
               ErrorCode::kInvalidArgument, name, " is for cp_rank ", seq.cp_rank, " of ",
               seq.cp_size, " but the communicator is rank ", comm.rank(), " of ", comm.size());
}
}  // namespace

std::string join_differences(std::string_view prefix, const std::vector<std::string>& diffs) {
  std::string message(prefix);
  for (size_t i = 0; i < diffs.size(); ++i) message += (i ? "; " : "") + diffs[i];
  return message;
}

ForwardResult forward_with_fingerprint(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                       const SequenceSharding& q_seq,
                                       const SequenceSharding& kv_seq,
                                       const AttentionParams& params, RngState rng,
                                       const RingOptions& options, Fingerprint fp) {
  check_group(comm, q_seq, "the q SequenceSharding");
  check_group(comm, kv_seq, "the kv SequenceSharding");
  unchecked::RingForwardResult r =
      unchecked::ring_attention_forward(comm, q, k, v, q_seq, kv_seq, params, rng, options);
  return ForwardResult(std::move(r.out), std::move(r.lse), r.rng, std::move(fp), comm.memory());
}

AttentionGradients backward_from_checked_state(Communicator& comm, ConstView dout, ConstView q,
                                               ConstView k, ConstView v, const ForwardResult& state,
                                               const SequenceSharding& q_seq,
                                               const SequenceSharding& kv_seq,
                                               const AttentionParams& params,
                                               const RingOptions& options) {
  check_group(comm, q_seq, "the q SequenceSharding");
  check_group(comm, kv_seq, "the kv SequenceSharding");
  return unchecked::ring_attention_backward(comm, dout, q, k, v, state.out.view(), state.lse.span(),
                                            q_seq, kv_seq, params, state.rng, options);
}

}  // namespace detail

ForwardResult attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                const AttentionParams& params, RngState rng,
                                const RingOptions& options) {
  Fingerprint fp = make_fingerprint(comm.rank(), comm.size(), q, k, v, q_seq, kv_seq, params, rng);
  return detail::forward_with_fingerprint(comm, q, k, v, q_seq, kv_seq, params, rng, options,
                                          std::move(fp));
}

AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const ForwardResult& state,
                                      const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                      const AttentionParams& params, const RingOptions& options) {
  // A moved-from ForwardResult keeps its fingerprint (plain values) but no tensors.
  CPATTN_CHECK(
      state.out.shape().size() == 4 && state.lse.shape().size() == 3, ErrorCode::kStateMismatch,
      "attention_backward: the ForwardResult holds no out/lse tensors (it was moved from)");
  const Fingerprint called =
      make_fingerprint(comm.rank(), comm.size(), q, k, v, q_seq, kv_seq, params, state.rng);
  const std::vector<std::string> diffs = state.fingerprint.differences(called);
  if (!diffs.empty()) {
    throw Error(ErrorCode::kStateMismatch,
                detail::join_differences(
                    "attention_backward: the ForwardResult does not belong to this call: ", diffs));
  }
  return detail::backward_from_checked_state(comm, dout, q, k, v, state, q_seq, kv_seq, params,
                                             options);
}

}  // namespace cpattn
