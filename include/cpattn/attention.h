// The public attention API (DESIGN.md section 6): forward returns every piece of state backward
// needs as a caller-owned ForwardResult; backward takes it back and checks that it belongs to the
// call. Nothing is cached anywhere else, so any backward order and any number of forwards without
// backward (evaluation) are correct, and recompute under activation checkpointing is exact.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/ring.h"
#include "cpattn/rng.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// Everything that identifies one attention call on one rank, recorded by forward and checked by
/// backward. Digests are 64-bit content hashes (cpattn/digest.h).
struct Fingerprint {
  std::array<int64_t, 4> q_shape{}, k_shape{}, v_shape{};     ///< [B, S_r, H, D]
  std::array<int64_t, 4> q_stride{}, k_stride{}, v_stride{};  ///< elements
  uint64_t positions_digest = 0;  ///< layout, seq_len, global positions and document ids
  uint64_t inputs_digest = 0;     ///< the values of q, k and v (identifies the layer/microbatch)
  float softmax_scale = 0.0f;     ///< resolved (default 1/sqrt(Dqk) filled in)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float dropout_p = 0.0f;
  Layout layout = Layout::kContiguous;
  int64_t seq_len = 0;
  int cp_rank = 0, cp_size = 1;
  RngState rng;

  /// One human-readable sentence per differing field, phrased "ForwardResult was produced with
  /// <field>=<this>, backward called with <field>=<other>". Empty when equal.
  std::vector<std::string> differences(const Fingerprint& called) const;
};

/// The fingerprint of a call with these arguments (what forward records and backward recomputes).
/// Cost: one pass over q, k and v (a few ms per 100 MB), negligible next to attention.
/// Throws like attention_forward on inconsistent arguments.
Fingerprint make_fingerprint(int cp_rank, int cp_size, ConstView q, ConstView k, ConstView v,
                             const SequenceSharding& seq, const AttentionParams& params,
                             RngState rng);

/// The state of one forward call, owned by the caller. Move-only; destroying it frees its buffers
/// (counted in the rank's MemoryCounter, as is the object itself in live_forward_results).
class ForwardResult {
 public:
  ForwardResult(Tensor out, Tensor lse, RngState rng, Fingerprint fp, MemoryCounter& counter);
  ForwardResult(ForwardResult&& other) noexcept;
  ForwardResult& operator=(ForwardResult&& other) noexcept;
  ForwardResult(const ForwardResult&) = delete;
  ForwardResult& operator=(const ForwardResult&) = delete;
  ~ForwardResult();

  Tensor out;    ///< [B, S_r, Hq, Dv], dense BSHD
  Tensor lse;    ///< fp32 [B, Hq, S_r], natural log; -inf for rows with no visible key
  RngState rng;  ///< the dropout stream this forward consumed
  Fingerprint fingerprint;

 private:
  MemoryCounter* counter_;  ///< null once moved from
};

/// Gradients of one rank, dense BSHD: dq [B, S_r, Hq, Dqk], dk [B, S_r, Hkv, Dqk],
/// dv [B, S_r, Hkv, Dv].
struct AttentionGradients {
  Tensor dq, dk, dv;
};

/// Context-parallel self-attention forward on rank comm.rank() of a CP group (ring attention,
/// DESIGN.md sections 1 and 5; math in kernel.h). q [B, S_r, Hq, Dqk], k [B, S_r, Hkv, Dqk],
/// v [B, S_r, Hkv, Dv] with S_r = seq.local_length(); any strides. seq.cp_rank/cp_size must equal
/// comm.rank()/size(). `rng` is recorded in the result (take it from a Generator).
/// Throws Error(kShapeMismatch | kInvalidArgument) for bad arguments, and the communicator's
/// errors (kTimeout, kPeerFailed) when another rank fails.
ForwardResult attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                const SequenceSharding& seq, const AttentionParams& params,
                                RngState rng, const RingOptions& options = {});

/// Backward of the forward that produced `state`, given dout [B, S_r, Hq, Dv] and the same q, k,
/// v, seq and params. Uses state.out, state.lse and state.rng (never anything global).
/// Throws Error(kStateMismatch) listing every field of state.fingerprint that differs from this
/// call's arguments (shape, strides, positions, inputs, params, cp_rank/cp_size), before any
/// computation or message; otherwise like attention_forward.
AttentionGradients attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, const ForwardResult& state,
                                      const SequenceSharding& seq, const AttentionParams& params,
                                      const RingOptions& options = {});

}  // namespace cpattn
