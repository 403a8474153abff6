// The safe attention API (docs/design.md section 6): forward returns every piece of state
// backward needs as a caller-owned ForwardResult; backward takes it back and checks that it
// belongs to the call. Nothing is cached anywhere else, so any backward order and any number of
// forwards without backward (evaluation) are correct, and recompute under activation
// checkpointing is exact. (Its building blocks are the detail tier, cpattn/detail/cp.h; the
// Fingerprint that ties a state to its call is in cpattn/fingerprint.h.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/cp_options.h"
#include "cpattn/error.h"
#include "cpattn/fingerprint.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/memory.h"
#include "cpattn/rng.h"
#include "cpattn/source_location.h"
#include "cpattn/strategy.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// A non-owning view of one forward's state: exactly what attention_backward reads. It lets a
/// framework keep out and lse in tensors of its own (saved by autograd, dropped and recomputed by
/// activation checkpointing) instead of in a ForwardResult; attention_backward checks it like a
/// ForwardResult, and also that `rng` (the RngState that produced out/lse) is the fingerprint's.
struct ForwardStateView {
  ConstView out;               ///< [B, Sq_r, Hq, Dv], any strides
  std::span<const float> lse;  ///< fp32 [B, Hq, Sq_r]
  RngState rng;                ///< the dropout stream out and lse were computed with
  Fingerprint fingerprint;     ///< recorded by the forward (ForwardResult::fingerprint)
};

/// The state of one forward call, owned by the caller. Move-only; destroying it frees its buffers
/// (counted in the rank's MemoryCounter, where the object itself counts as a live ForwardResult).
class ForwardResult {
 public:
  ForwardResult(Tensor out, Tensor lse, RngState rng, Fingerprint fp, MemoryCounter& counter);
  ForwardResult(ForwardResult&& other) noexcept;
  ForwardResult& operator=(ForwardResult&& other) noexcept;
  ForwardResult(const ForwardResult&) = delete;
  ForwardResult& operator=(const ForwardResult&) = delete;
  ~ForwardResult();

  /// The view attention_backward reads (valid while this object lives and is not moved from).
  ForwardStateView view() const;

  Tensor out;  ///< [B, S_r, Hq, Dv], dense BSHD
  /// fp32 [B, Hq, S_r], natural log; -inf for rows with no visible key (the head's sink logit
  /// with sinks)
  Tensor lse;
  RngState rng;  ///< the dropout stream this forward consumed
  Fingerprint fingerprint;

 private:
  std::shared_ptr<MemoryCounter> counter_;  ///< null once moved from
};

/// Memory held through cpattn as the state layer sees it: every counted buffer, and the
/// ForwardResults alive (a soak test proves both return to their baseline).
struct StateMemoryStats {
  int64_t live_bytes = 0;            ///< bytes currently allocated through cpattn
  int64_t peak_bytes = 0;            ///< high-water mark since the counter's last reset_peak()
  int64_t live_forward_results = 0;  ///< ForwardResult objects currently alive
  int64_t peak_forward_results = 0;  ///< high-water mark since the last reset_peak()
};
/// The stats of `counter`: the process (default), or one rank's comm.memory().
StateMemoryStats memory_stats(const MemoryCounter& counter = process_memory());

/// Sets the number of this rank's next checked call on comm's group. The checked calls below
/// number their calls on a group 0, 1, 2, ... (kept with the communicator, Communicator::
/// layer_state), and every rank's call agreement compares the numbers, with the rest of the
/// call's record and its call site, before any data moves, so a rank whose calls are out of step
/// with the others' (backward calls in another order; a skipped call, when the call that follows
/// differs from the skipped one in a field or its call site) is caught (two identical calls from
/// one call site cannot be told apart: docs/design.md section 6, "Call sites"). A caller whose
/// communicator object lives for one call only (the torch binding makes one per call over a
/// ProcessGroup) keeps the count itself and passes it here before each call.
void set_next_call_number(Communicator& comm, uint64_t next);

/// Context-parallel attention forward on rank comm.rank() of a CP group (docs/design.md
/// sections 1 and 5; math in kernel.h), split as options.strategy says (strategy.h: ring by
/// default, allgather, ulysses, hybrid:UxR; docs/strategies.md). Every strategy returns the same
/// ForwardResult: out and lse of this rank's queries in q_seq's sharding. q [B, Sq_r, Hq, Dqk], k
/// [B, Sk_r, Hkv, Dqk], v [B, Sk_r, Hkv, Dv] with Sq_r = q_seq.local_length(), Sk_r =
/// kv_seq.local_length(); any strides; fp32, or bf16 / fp16 (one dtype, the ring strategy only:
/// out is then of that dtype, lse fp32; docs/design.md section 1.1). q_seq and kv_seq say how the
/// query and the key/value sequences are split (the same object for self-attention; different ones
/// for cross-attention or Sq != Sk); their cp_rank/cp_size must equal comm.rank()/size(). `rng` is
/// recorded in the result (take it from a Generator). Before any data moves, every rank learns
/// every other rank's description of the call (call number, call site, shapes, layouts, lengths,
/// positions/documents, params, RngState, the strategy and CpOptions::document_aware; one
/// all_to_all of fixed-size records) and all throw Error(kRankDisagreement) naming the field and
/// the ranks when they differ; a rank that refuses its own arguments takes part too, so the
/// others throw at once, quoting its reason. The call site is options.call_site, or by default
/// `caller`, the source location of this call (leave it defaulted). A strategy that
/// cannot run this call (check_strategy) throws Error(kInvalidArgument) on every rank. Throws
/// Error(kShapeMismatch | kInvalidArgument) for bad arguments, and the communicator's errors
/// (kTimeout, kPeerFailed) when another rank fails.
ForwardResult attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                const AttentionParams& params, RngState rng,
                                const CpOptions& options = {},
                                SourceLocation caller = SourceLocation::current());
/// Self-attention: q and k/v split alike by `seq`.
inline ForwardResult attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                       const SequenceSharding& seq, const AttentionParams& params,
                                       RngState rng, const CpOptions& options = {},
                                       SourceLocation caller = SourceLocation::current()) {
  return attention_forward(comm, q, k, v, seq, seq, params, rng, options, caller);
}

/// Backward of the forward that produced `state`, given dout [B, Sq_r, Hq, Dv], the same q, k, v,
/// shardings and params, and `rng`: the RngState of the forward this backward is for (the one
/// the caller drew, e.g. from its Generator). Uses state.out, state.lse and state.rng (never
/// anything global); out and lse must be as the forward returned them: backward digests them
/// (one pass, as over q, k and v) and refuses them changed in any bit since the forward (a
/// residual added into out would give the gradients of the changed values).
/// Returns this rank's dq, dk, dv (dense BSHD) and, with sinks, dsink fp32 [Hq]
/// summed over every rank's rows, the same bits on every rank (one allreduce over the group:
/// docs/design.md section 5.6). Throws Error(kStateMismatch) listing every field of
/// state.fingerprint that differs from this call's arguments (shape, strides, positions, inputs,
/// params: the sink logits, softcap, ALiBi slopes and slices among them, cp_rank/cp_size,
/// strategy, and rng: the ForwardResult of another forward on the same inputs is refused), or
/// "the ForwardResult's out or lse changed after its forward" (Fingerprint::outputs_digest),
/// before any computation; the other ranks, which learn of it in the call agreement, throw
/// Error(kRankDisagreement) at once. Otherwise throws like attention_forward.
AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const ForwardResult& state,
                                      const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                      const AttentionParams& params, RngState rng,
                                      const CpOptions& options = {},
                                      SourceLocation caller = SourceLocation::current());
/// Backward from a ForwardStateView (out and lse held elsewhere); checks and throws like the
/// ForwardResult overload, plus Error(kStateMismatch) when state.rng (what produced out/lse)
/// differs from state.fingerprint.rng, or state.out / state.lse do not have the shapes of this
/// call's outputs ([B, Sq_r, Hq, Dv], B * Hq * Sq_r floats).
AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const ForwardStateView& state,
                                      const SequenceSharding& q_seq, const SequenceSharding& kv_seq,
                                      const AttentionParams& params, RngState rng,
                                      const CpOptions& options = {},
                                      SourceLocation caller = SourceLocation::current());
/// Self-attention: q and k/v split alike by `seq`.
inline AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                             ConstView k, ConstView v, const ForwardResult& state,
                                             const SequenceSharding& seq,
                                             const AttentionParams& params, RngState rng,
                                             const CpOptions& options = {},
                                             SourceLocation caller = SourceLocation::current()) {
  return attention_backward(comm, dout, q, k, v, state, seq, seq, params, rng, options, caller);
}

/// Which checked call refuse_attention_call stands for.
enum class RefusedCall { kForward, kBackward };

/// For a caller whose own checks refuse a checked call before it can make it (a wrapper or a
/// binding that cannot even read its arguments: a tensor of the wrong rank or dtype, a layout
/// name it does not know): takes part in that call's agreement as a rank that refuses it, with
/// `reason` (its code and the start of its message), and takes the call's number, so the other
/// ranks of the group throw Error(kRankDisagreement) quoting it at once instead of waiting for a
/// call that never comes. Then throws `reason`; but a `reason` of code kRankDisagreement (the
/// caller learned before the call that another rank refuses it) throws the agreement's error,
/// which quotes that rank's reason. The call site is options.call_site, or `caller`.
/// Throws the communicator's errors when a rank does not take part.
[[noreturn]] void refuse_attention_call(Communicator& comm, const Error& reason, RefusedCall kind,
                                        const CpOptions& options = {},
                                        SourceLocation caller = SourceLocation::current());

}  // namespace cpattn
