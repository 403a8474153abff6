// Recompute (activation checkpointing) with replay checks.
#include "cpattn/recompute.h"

#include <span>
#include <string>
#include <vector>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "state/state_detail.h"

namespace cpattn {

#ifdef NDEBUG
const bool kStrictRecomputeDefault = false;
#else
const bool kStrictRecomputeDefault = true;
#endif

namespace {

// Why a recompute with fingerprint `called` and RngState `replayed` does not replay the forward
// `recorded` (nullopt: it does).
std::optional<Error> replay_error(const Fingerprint& recorded, const Fingerprint& called,
                                  RngState replayed) {
  if (replayed != recorded.rng) {
    return Error(ErrorCode::kRecomputeDiverged,
                 detail::str_cat("recompute diverged: replayed RngState ", to_string(replayed),
                                 " differs from the recorded ", to_string(recorded.rng),
                                 " (restore the generator state before recomputing; otherwise "
                                 "dropout masks and gradients would be silently wrong)"));
  }
  if (const std::vector<std::string> diffs = recorded.differences(called, "recompute");
      !diffs.empty()) {
    return Error(
        ErrorCode::kRecomputeDiverged,
        detail::join_differences(
            "recompute diverged: the recomputed call differs from the first forward: ", diffs));
  }
  return std::nullopt;
}
// Strict mode: every rank compares its recomputed out/lse digest with its first forward's, and
// all of them learn which ranks differ (one allreduce of P flags), so a rank never throws alone
// while the others go on to wait for it. The differing ranks throw kRecomputeDiverged, the
// others kRankDisagreement naming them.
void check_output_on_every_rank(Communicator& comm, const ForwardResult& state,
                                const AttentionCheckpoint& checkpoint) {
  const uint64_t again = state.fingerprint.outputs_digest;
  const uint64_t first = checkpoint.fingerprint.outputs_digest;
  const bool differs = again != first;
  std::vector<double> flags(static_cast<size_t>(comm.size()), 0.0);
  flags[static_cast<size_t>(comm.rank())] = differs ? 1.0 : 0.0;
  comm.allreduce_sum(std::span<double>(flags));
  CPATTN_CHECK(!differs, ErrorCode::kRecomputeDiverged,
               "recompute diverged: recomputed out/lse digest ", digest_hex(again),
               " differs from the first forward's ", digest_hex(first),
               " although inputs, RngState and kernel numerics match (a kernel that is not "
               "deterministic: please report it)");
  std::string ranks;
  for (size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] != 0.0) ranks += detail::str_cat(ranks.empty() ? "" : ", ", r);
  }
  CPATTN_CHECK(ranks.empty(), ErrorCode::kRankDisagreement, "strict recompute (call ",
               state.fingerprint.call_number, "): the recomputed out/lse of rank(s) ", ranks,
               " differ from their first forward's");
}

}  // namespace

AttentionCheckpoint make_checkpoint(const ForwardResult& state) { return {state.fingerprint}; }

ForwardResult recompute_forward(Communicator& comm, const AttentionCheckpoint& checkpoint,
                                RngState replayed, ConstView q, ConstView k, ConstView v,
                                const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                const AttentionParams& params, const RecomputeOptions& options,
                                SourceLocation caller) {
  const Fingerprint& recorded = checkpoint.fingerprint;
  // Arguments this rank refuses become the call's refusal, which the agreement carries to every
  // rank; otherwise a replay that differs from the recorded forward is.
  std::optional<Error> diverged;
  std::optional<Fingerprint> called = detail::fingerprint_or_refusal(
      comm, q, k, v, q_seq, kv_seq, params, replayed, options.cp, true, diverged);
  if (!diverged) diverged = replay_error(recorded, *called, replayed);
  // `called` is this call's fingerprint already: q/k/v are hashed once per recompute.
  ForwardResult state = detail::checked_forward(
      comm, options.strict ? detail::CallOp::kStrictRecompute : detail::CallOp::kRecompute, q, k, v,
      q_seq, kv_seq, params, replayed, options.cp,
      detail::call_site_text(options.cp.call_site, caller), std::move(called), std::move(diverged));
  if (options.strict) check_output_on_every_rank(comm, state, checkpoint);
  return state;
}

AttentionGradients recompute_backward(Communicator& comm, const AttentionCheckpoint& checkpoint,
                                      RngState replayed, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const SequenceSharding& q_seq,
                                      const SequenceSharding& kv_seq, const AttentionParams& params,
                                      const RecomputeOptions& options, SourceLocation caller) {
  const ForwardResult state = recompute_forward(comm, checkpoint, replayed, q, k, v, q_seq, kv_seq,
                                                params, options, caller);
  // The fresh state was made from these very arguments: its fingerprint is this call's.
  return detail::checked_backward(comm, dout, q, k, v, state.view(), q_seq, kv_seq, params,
                                  options.cp, detail::call_site_text(options.cp.call_site, caller),
                                  &state.fingerprint, std::nullopt);
}

}  // namespace cpattn
