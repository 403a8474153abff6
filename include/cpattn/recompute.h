// Activation checkpointing for attention (docs/design.md section 6): the first forward keeps only a
// small AttentionCheckpoint; backward recomputes the forward with the recorded RngState, checks
// that the recompute reproduces the first forward, runs backward and frees the fresh state.
#pragma once

#include <cstdint>

#include "cpattn/attention.h"
#include "cpattn/source_location.h"

namespace cpattn {

/// What survives a checkpointed attention forward: no tensors, about 350 bytes. The training loop
/// keeps the layer input itself (from which it recomputes q, k, v).
struct AttentionCheckpoint {
  /// Of the first forward: its RngState, its q/k/v digest and its out/lse digest (strict mode
  /// compares the recomputed forward's with it) among the rest.
  Fingerprint fingerprint;
};

/// Records the checkpoint of a first forward. The caller uses state.out, then drops `state`.
AttentionCheckpoint make_checkpoint(const ForwardResult& state);

/// Strict mode (compare the recomputed output digest with the first one) is on by default when
/// the library is a debug build (compiled without NDEBUG); a release library checks the RngState
/// and the inputs only. The library's build decides, not the caller's NDEBUG, so every
/// translation unit sees one RecomputeOptions.
extern const bool kStrictRecomputeDefault;

struct RecomputeOptions {
  bool strict = kStrictRecomputeDefault;
  /// The options of the recomputed forward and of the backward: the first forward's strategy
  /// (the fingerprint compares it).
  CpOptions cp;
};

/// Recomputes the forward recorded in `checkpoint`. `replayed` is the RngState the training loop
/// replays for this layer (e.g. from its Generator after restoring the recorded state): it must
/// equal the recorded one. q, k, v, seq and params must be those of the first forward. Throws
/// Error(kRecomputeDiverged) "recompute diverged: ..." when the replayed RngState differs (naming
/// both), when q/k/v differ from the first forward's (input digests), when any other fingerprint
/// field differs, or (strict) when the recomputed out differs from the first one. The ranks agree
/// on the call like attention_forward (its call site: options.cp.call_site, by default
/// `caller`; ranks that differ in `strict` fail it). Strict mode adds one allreduce of P flags
/// after the forward, so that when some rank's output differs every rank throws: that rank
/// kRecomputeDiverged, the others Error(kRankDisagreement) naming it.
ForwardResult recompute_forward(Communicator& comm, const AttentionCheckpoint& checkpoint,
                                RngState replayed, ConstView q, ConstView k, ConstView v,
                                const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                const AttentionParams& params, const RecomputeOptions& options = {},
                                SourceLocation caller = SourceLocation::current());
/// Self-attention: q and k/v split alike by `seq`.
inline ForwardResult recompute_forward(Communicator& comm, const AttentionCheckpoint& checkpoint,
                                       RngState replayed, ConstView q, ConstView k, ConstView v,
                                       const SequenceSharding& seq, const AttentionParams& params,
                                       const RecomputeOptions& options = {},
                                       SourceLocation caller = SourceLocation::current()) {
  return recompute_forward(comm, checkpoint, replayed, q, k, v, seq, seq, params, options, caller);
}

/// recompute_forward, then attention_backward with the fresh state, which is freed before
/// returning: during the call exactly one ForwardResult of this layer is alive.
AttentionGradients recompute_backward(Communicator& comm, const AttentionCheckpoint& checkpoint,
                                      RngState replayed, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const SequenceSharding& q_seq,
                                      const SequenceSharding& kv_seq, const AttentionParams& params,
                                      const RecomputeOptions& options = {},
                                      SourceLocation caller = SourceLocation::current());
/// Self-attention: q and k/v split alike by `seq`.
inline AttentionGradients recompute_backward(Communicator& comm,
                                             const AttentionCheckpoint& checkpoint,
                                             RngState replayed, ConstView dout, ConstView q,
                                             ConstView k, ConstView v, const SequenceSharding& seq,
                                             const AttentionParams& params,
                                             const RecomputeOptions& options = {},
                                             SourceLocation caller = SourceLocation::current()) {
  return recompute_backward(comm, checkpoint, replayed, dout, q, k, v, seq, seq, params, options,
                            caller);
}

}  // namespace cpattn
