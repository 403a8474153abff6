// Private pieces shared by attention.cpp and recompute.cpp: the forward/backward bodies without
// the fingerprint work, so recompute hashes q/k/v once per call instead of three times.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cpattn/attention.h"

namespace cpattn::detail {

/// "<prefix><diff 1>; <diff 2>; ..." for an error message.
std::string join_differences(std::string_view prefix, const std::vector<std::string>& diffs);

/// Ring forward wrapped in a ForwardResult carrying `fp`, which the caller computed for exactly
/// these arguments (make_fingerprint(comm.rank(), comm.size(), q, k, v, q_seq, kv_seq, params,
/// rng)).
ForwardResult forward_with_fingerprint(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                       const SequenceSharding& q_seq,
                                       const SequenceSharding& kv_seq,
                                       const AttentionParams& params, RngState rng,
                                       const RingOptions& options, Fingerprint fp);

/// Ring backward from `state`, whose fingerprint the caller has already matched to this call.
AttentionGradients backward_from_checked_state(Communicator& comm, ConstView dout, ConstView q,
                                               ConstView k, ConstView v, const ForwardResult& state,
                                               const SequenceSharding& q_seq,
                                               const SequenceSharding& kv_seq,
                                               const AttentionParams& params,
                                               const RingOptions& options);

}  // namespace cpattn::detail
