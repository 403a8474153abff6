// The ring passes themselves, on block tables rather than shardings and writing into the caller's
// views: ring_attention_forward / ring_attention_backward (cpattn/detail/cp.h) run them on the
// shards of a SequenceSharding, the hybrid strategy on the row blocks of its grid with head-sharded
// views.
#pragma once

#include <cstdint>
#include <span>

#include "cp/ring_detail.h"
#include "cpattn/communicator.h"
#include "cpattn/detail/cp.h"
#include "cpattn/kernel.h"

namespace cpattn::detail {

/// One ring call: this rank's q [B, Sq_r, Hq, Dqk] and k/v [B, Sk_r, Hkv, Dqk|Dv] (any strides)
/// with Sq_r = q_blocks.length(rank), Sk_r = kv_blocks.length(rank); every rank's block
/// positions and documents; and the dropout head coordinates of q's heads (kernel.h).
struct RingProblem {
  ConstView q, k, v;
  const BlockTable* q_blocks = nullptr;
  const BlockTable* kv_blocks = nullptr;
  AttentionParams params;
  RngState rng;
  int64_t head_offset = 0, total_heads = 0;
};

/// The ring's forward and backward of a validated call (cp_forward / cp_backward of kRing):
/// block tables of the call's shardings, the results allocated from comm.memory(), the call's
/// time added to options.stats.
CpForwardResult ring_call_forward(const CpCall& call);
AttentionGradients ring_call_backward(const CpCall& call, const BackwardState& state);

/// The sizes of a ring problem on `comm` (trusted: the caller validated the arguments).
CpDims ring_dims(const Communicator& comm, const RingProblem& p);

/// Ring forward (cpattn/detail/cp.h) into out [B, Sq_r, Hq, Dv] (any strides) and lse fp32 [B, Hq,
/// Sq_r]. Adds kernel and communication time to options.stats (the caller's CallTimer adds the
/// rest). The ring's buffers come from `lease` (the hybrid's call) or, when null, from a lease of
/// its own on options.workspace.
void ring_forward(Communicator& comm, const RingProblem& p, const CpOptions& options, View out,
                  std::span<float> lse, WorkspaceLease* lease = nullptr);

/// Ring backward (cpattn/detail/cp.h) from dout [B, Sq_r, Hq, Dv], the merged lse and delta = D_i
/// (both fp32 [B, Hq, Sq_r], delta from row_dot of dout and the forward's out), into dq, dk, dv
/// (shaped like q, k, v, any strides; overwritten). With sinks, `dsink` (fp32 [total heads],
/// p.total_heads or Hq) receives the sink gradient of this rank's rows for q's heads
/// (BackwardOptions::dsink of the first block this rank computes: it depends on lse and delta
/// only, so exactly one call of the ring asks for it; 0 when the rank computes no block, whose
/// rows then see no key and have out 0, so D_i = 0), other entries untouched; empty without
/// sinks. Buffers as ring_forward's.
void ring_backward(Communicator& comm, const RingProblem& p, const CpOptions& options,
                   ConstView dout, std::span<const float> lse, std::span<const float> delta,
                   View dq, View dk, View dv, std::span<float> dsink,
                   WorkspaceLease* lease = nullptr);

}  // namespace cpattn::detail
