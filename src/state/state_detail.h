// Private pieces shared by attention.cpp and recompute.cpp: the checked forward and backward
// bodies after the fingerprint work (so recompute hashes q/k/v once per call), and the error
// messages they share.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/detail/cp.h"
#include "state/call_agreement.h"

namespace cpattn::detail {

/// Fingerprint::outputs_digest of a forward's out [B, Sq_r, Hq, Dv] (any strides, its dtype) and
/// lse (fp32 [B, Hq, Sq_r]): Digest::view of out on up to `num_threads` threads, then lse's
/// floats. The forward records it, attention_backward compares its state's with it, and a strict
/// recompute compares the recomputed forward's with the first one's.
uint64_t outputs_digest(ConstView out, std::span<const float> lse, int num_threads);

/// "<prefix><diff 1>; <diff 2>; ..." for an error message.
std::string join_differences(std::string_view prefix, const std::vector<std::string>& diffs);

/// The one validation of a checked call (validate_cp_call), made before it agrees with the group;
/// its error becomes the call's refusal: when it throws, `refusal` (if still empty) takes the
/// error and the result is nullopt. A call that is refused already (`refusal` set) is not
/// validated.
std::optional<CpCall> validated_or_refusal(Communicator& comm, ConstView q, ConstView k,
                                           ConstView v, const SequenceSharding& q_seq,
                                           const SequenceSharding& kv_seq,
                                           const AttentionParams& params, RngState rng,
                                           const CpOptions& options, std::optional<Error>& refusal);

/// make_fingerprint(comm.rank(), comm.size(), q, k, v, q_seq, kv_seq, params, rng, strategy,
/// isa, num_threads, digest_inputs) of `options` for a checked call (digest_inputs: the forward's
/// CpOptions::for_backward; true for backward and recompute, whose fingerprints are compared with
/// a forward's), its errors turned into the call's refusal: when it throws, `refusal` (if still
/// empty) takes the error and the result is nullopt. The call then still takes its call number
/// and its part in the call agreement, marked as refusing, so every rank raises at once
/// (docs/design.md section 6) instead of the others running on.
std::optional<Fingerprint> fingerprint_or_refusal(
    const Communicator& comm, ConstView q, ConstView k, ConstView v, const SequenceSharding& q_seq,
    const SequenceSharding& kv_seq, const AttentionParams& params, RngState rng,
    const CpOptions& options, bool digest_inputs, std::optional<Error>& refusal);

/// A checked forward: agrees on the call (op kForward, kRecompute or kStrictRecompute;
/// `local_error` is this rank's own reason to refuse it, see agree_or_throw), runs the strategy's
/// forward and wraps its result in a ForwardResult carrying `fp`, which the caller computed for
/// exactly these arguments (fingerprint_or_refusal; nullopt only with a local_error); the result's
/// fingerprint gets the call's number and, when fp digested q/k/v, the outputs_digest of out and
/// lse. `call_site`: call_site_text of the public call.
ForwardResult checked_forward(Communicator& comm, CallOp op, ConstView q, ConstView k, ConstView v,
                              const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                              const AttentionParams& params, RngState rng, const CpOptions& options,
                              std::string_view call_site, std::optional<Fingerprint> fp,
                              std::optional<Error> local_error);

/// A checked backward from `state`, whose fingerprint the caller matched to this call (`called`,
/// or the mismatch in `local_error`; called is null only with a local_error): checks what the
/// backward reads (dout, out, lse), agrees on the call, then runs the strategy's backward.
AttentionGradients checked_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                    ConstView v, const ForwardStateView& state,
                                    const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                    const AttentionParams& params, const CpOptions& options,
                                    std::string_view call_site, const Fingerprint* called,
                                    std::optional<Error> local_error);

}  // namespace cpattn::detail
