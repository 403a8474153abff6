// Ring forward: P kernel calls against the k/v blocks travelling around the ring, continuing one
// fp32 online softmax from block to block (SoftmaxCarry), so there is no separate merge pass.
#include <optional>
#include <utility>

#include "cp/ring_core.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"

namespace cpattn {

namespace detail {

CpDims ring_dims(const Communicator& comm, const RingProblem& p) {
  CpDims d{attention_dims(p.q, p.k, p.v)};
  d.world = comm.size();
  d.rank = comm.rank();
  d.max_block = p.kv_blocks->max_length();
  return d;
}

void ring_forward(Communicator& comm, const RingProblem& p, const CpOptions& options, View out,
                  std::span<float> lse, WorkspaceLease* lease) {
  const CpDims d = ring_dims(comm, p);
  CpChannel channel(comm, options.stats);
  MemoryCounter* mem = &comm.memory();
  const RelayPlan plan(p.params, *p.q_blocks, *p.kv_blocks, options.document_aware);
  std::optional<WorkspaceLease> own_lease;
  WorkspaceLease& buffers = lease != nullptr ? *lease : own_lease.emplace(options.workspace, mem);
  KvRelay relay(channel, buffers, d, *p.kv_blocks, plan, TagStream::kForwardKv, p.k, p.v);
  if (options.stats != nullptr) {
    // The plain ring relays blocks r, r - 1, ..., r - P + 2 (every step but the last).
    const PackedKv pk{d.B, d.Hkv, d.Dqk, d.Dv, p.k.dtype};
    for (int s = 0; s + 1 < d.world; ++s) {
      options.stats->bytes_sent_plain_ring +=
          static_cast<int64_t>(sizeof(float)) *
          pk.floats(p.kv_blocks->length(ring_step(d.rank, d.world, s).kv_block));
    }
  }
  // Which steps compute (a pure function of the block tables): the first starts the online
  // softmax, the last normalises it into out.
  int first = -1, last = -1;
  for (int s = 0; s < d.world; ++s) {
    if (plan.needs(d.rank, ring_step(d.rank, d.world, s).kv_block)) {
      if (first < 0) first = s;
      last = s;
    }
  }
  // The blocks continue one online softmax (SoftmaxCarry): out holds the unnormalised
  // accumulator between them, row_max/row_sum the running max and sum. One computed block needs
  // no carry: it writes out like a single kernel call. The accumulator is fp32: a bf16 or fp16
  // out gets an fp32 one and is rounded once, from the finished result, at the end.
  const bool carried = first != last;
  const bool own_accumulator = carried && out.dtype != DType::kF32;
  Tensor accumulator(
      {own_accumulator ? d.B : 0, own_accumulator ? d.Sq : 0, d.Hq, own_accumulator ? d.Dv : 0},
      mem);
  const View target = own_accumulator ? accumulator.view() : out;
  Tensor row_max({carried ? d.B : 0, d.Hq, d.Sq}, mem),
      row_sum({carried ? d.B : 0, d.Hq, d.Sq}, mem);
  const std::vector<int64_t>& q_pos = p.q_blocks->pos[static_cast<size_t>(d.rank)];
  const std::vector<int64_t>& q_doc = p.q_blocks->doc[static_cast<size_t>(d.rank)];
  const KernelOptions kernel = kernel_options(comm, options);
  if (first < 0) {
    // No visible key: the kernel's result of a call over no keys (out 0; lse -inf, or the
    // head's sink logit with sinks: section 1's empty row), so the rule is stated once.
    ConstView no_k = p.k, no_v = p.v;
    no_k.shape[1] = 0;
    no_v.shape[1] = 0;
    AttentionInputs in{p.q, no_k, no_v, q_pos, {}, q_doc, {}};
    in.head_offset = p.head_offset;
    in.total_heads = p.total_heads;
    attention_kernel_forward(in, p.params, p.rng, out, lse, kernel);
  }

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    comm.throw_if_group_failed();
    relay.advance(step, s);
    if (!plan.needs(d.rank, step.kv_block)) {
      if (options.stats != nullptr) ++options.stats->blocks_skipped;
      continue;
    }
    const std::vector<int64_t>& k_pos = p.kv_blocks->pos[static_cast<size_t>(step.kv_block)];
    const std::vector<int64_t>& k_doc = p.kv_blocks->doc[static_cast<size_t>(step.kv_block)];
    AttentionInputs in{p.q, relay.k(), relay.v(), q_pos, k_pos, q_doc, k_doc};
    in.head_offset = p.head_offset;
    in.total_heads = p.total_heads;
    SoftmaxCarry carry;
    if (carried) carry = {row_max.span(), row_sum.span(), s != first, s == last};
    {
      const ScopedSeconds t(options.stats ? &options.stats->kernel_seconds : nullptr);
      attention_kernel_forward(in, p.params, p.rng, target, lse, carry, kernel);
    }
    if (options.stats != nullptr) ++options.stats->blocks_computed;
  }
  if (own_accumulator) copy_view(std::as_const(accumulator).view(), out);
  relay.finish();
  // Borrowed through an outer call's lease: free call-owned buffers now, not at its end.
  if (lease != nullptr) {
    lease->done({WorkspaceBuffer::kRelay0, WorkspaceBuffer::kRelay1, WorkspaceBuffer::kOwnKv});
  }
}

}  // namespace detail

namespace detail {

CpForwardResult ring_call_forward(const CpCall& c) {
  const CpDims& d = c.d;
  const CallTimer call_timer(c.options.stats);
  const BlockTable q_blocks = BlockTable::of(c.q_seq);
  const BlockTable kv_blocks = BlockTable::of(c.kv_seq);
  MemoryCounter* mem = &c.comm.memory();
  // Not zero-filled: ring_forward writes every row of out and lse (clearing a 16 MiB out took
  // about 1 % of an S 4096 forward on 2 threads).
  CpForwardResult res{Tensor::uninitialized({d.B, d.Sq, d.Hq, d.Dv}, c.q.dtype, mem),
                      Tensor::uninitialized({d.B, d.Hq, d.Sq}, DType::kF32, mem), c.rng};
  const RingProblem p{c.q, c.k, c.v, &q_blocks, &kv_blocks, c.params, c.rng};
  ring_forward(c.comm, p, c.options, res.out.view(), res.lse.span());
  return res;
}

}  // namespace detail

}  // namespace cpattn
