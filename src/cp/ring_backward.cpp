// Ring backward: dq accumulates locally; each relayed block's dk/dv accumulator follows its k/v
// around the ring, every rank on the block's path adding its share in a fixed order, and goes
// home from the last rank that needs the block; a direct block's shares come straight home and
// are added there in the same order.
#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "cp/ring_core.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"

namespace cpattn {

namespace {

std::span<const float> first(std::span<const float> buffer, int64_t n) {
  return buffer.first(static_cast<size_t>(n));
}

}  // namespace

namespace detail {

void ring_backward(Communicator& comm, const RingProblem& p, const CpOptions& options,
                   ConstView dout, std::span<const float> lse, std::span<const float> delta,
                   View dq, View dk, View dv, WorkspaceLease* lease) {
  const CpDims d = ring_dims(comm, p);
  CpChannel channel(comm, options.stats);
  MemoryCounter* mem = &comm.memory();
  // The kernel accumulates dq over the blocks, in fp32: a bf16 or fp16 dq gets an fp32
  // accumulator and is rounded once at the end.
  const bool own_dq = dq.dtype != DType::kF32;
  Tensor dq_accumulator({own_dq ? d.B : 0, own_dq ? d.Sq : 0, d.Hq, own_dq ? d.Dqk : 0}, mem);
  const View dq_target = own_dq ? dq_accumulator.view() : dq;
  zero_view(dq_target);

  // Buffers besides the k/v relay (each sized for the largest block, packed dk|dv as PackedKv):
  //   grad[2]  dk/dv accumulators (fp32 whatever the dtype of k/v, on the wire too): grad[s % 2] is
  //   received at step s while this rank computes,
  //            and the kernel adds this rank's share straight into it (BackwardOptions::
  //            before_dkdv waits for the accumulator just before the first dk/dv write, so the
  //            transfer overlaps the work before it); it is then sent on while grad[(s + 1) % 2]
  //            may still be in flight from step s - 1. At step 0 the kernel writes its share of
  //            the own block into grad[0] (overwrite_dkdv).
  //   home     this rank's own finished accumulator, received from the last rank on its path
  //            (its receive is posted before step 0, so that send never waits for this rank);
  //            for a direct own block, the accumulator itself: the own share, then the others
  //   shares   a direct own block's shares from the ranks that need it, one buffer each (their
  //            receives are posted before step 0 too), added into home in ring order at the end
  const RelayPlan plan(p.params, *p.q_blocks, *p.kv_blocks, options.document_aware);
  std::optional<WorkspaceLease> own_lease;
  WorkspaceLease& buffers = lease != nullptr ? *lease : own_lease.emplace(options.workspace, mem);
  KvRelay relay(channel, buffers, d, *p.kv_blocks, plan, TagStream::kBackwardKv, p.k, p.v);
  const PackedKv pk{d.B, d.Hkv, d.Dqk, d.Dv};                // the fp32 dk/dv accumulators
  const PackedKv pk_kv{d.B, d.Hkv, d.Dqk, d.Dv, p.k.dtype};  // the travelling k/v blocks
  const int64_t ring_floats = d.world > 1 ? pk.floats(d.max_block) : 0;
  const std::array<std::span<float>, 2> grad{buffers.get(WorkspaceBuffer::kGrad0, ring_floats),
                                             buffers.get(WorkspaceBuffer::kGrad1, ring_floats)};
  const int own_reach = plan.reach(d.rank);
  const std::vector<int>& share_steps = plan.direct_steps(d.rank);
  const int64_t own_floats = pk.floats(d.Sk);
  const std::span<float> home =
      buffers.get(WorkspaceBuffer::kHome, d.world > 1 && own_reach > 0 ? own_floats : 0);
  const std::span<float> shares =
      buffers.get(WorkspaceBuffer::kShares, static_cast<int64_t>(share_steps.size()) * own_floats);
  if (options.stats != nullptr) {
    // The plain ring relays P - 1 k/v blocks (as in the forward) and sends P accumulators.
    for (int s = 0; s < d.world && d.world > 1; ++s) {
      const int64_t len = p.kv_blocks->length(ring_step(d.rank, d.world, s).kv_block);
      const int64_t kv_bytes = static_cast<int64_t>(sizeof(float)) * pk_kv.floats(len);
      const int64_t grad_bytes = static_cast<int64_t>(sizeof(float)) * pk.floats(len);
      options.stats->bytes_sent_plain_ring += s + 1 < d.world ? kv_bytes + grad_bytes : grad_bytes;
    }
  }

  const std::vector<int64_t>& q_pos = p.q_blocks->pos[static_cast<size_t>(d.rank)];
  const std::vector<int64_t>& q_doc = p.q_blocks->doc[static_cast<size_t>(d.rank)];
  std::array<Request, 2> grad_sends;
  Request grad_recv, home_recv;
  std::vector<Request> share_recvs;
  BackwardOptions kernel;
  static_cast<KernelOptions&>(kernel) = kernel_options(comm, options);
  kernel.accumulate = true;  // dq sums over blocks
  kernel.delta = delta;
  const auto grad_tag = [](int step) { return stream_tag(TagStream::kBackwardGrad, step); };
  const auto home_tag = [](int step) { return stream_tag(TagStream::kBackwardHome, step); };
  const auto share = [&](size_t i) {
    return shares.subspan(i * static_cast<size_t>(own_floats), static_cast<size_t>(own_floats));
  };
  for (size_t i = 0; i < share_steps.size(); ++i) {
    const int from = share_steps[i];
    share_recvs.push_back(channel.recv(share(i), (d.rank + from) % d.world, home_tag(from)));
  }
  if (d.world > 1 && own_reach > 0 && share_steps.empty()) {
    home_recv = channel.recv(home, (d.rank + own_reach) % d.world, home_tag(own_reach));
  }

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    const int cur = s % 2;
    comm.throw_if_group_failed();
    relay.advance(step, s);
    if (!plan.on_path(d.rank, s)) {
      if (options.stats != nullptr) ++options.stats->blocks_skipped;
      continue;
    }
    const int64_t len = relay.length();
    const int64_t floats = pk.floats(len);
    // A direct block's share goes home on its own: nothing to receive, the kernel writes it.
    const bool direct = plan.direct(step.kv_block);
    bool received = s == 0 || direct;
    const auto wait_accumulator = [&] {
      channel.wait_recv(grad_recv, floats, "ring backward: floats of the dk/dv accumulator");
      received = true;
    };
    if (s > 0) {
      // grad[cur] was sent on at step s - 2; the sender of this accumulator finished step s - 1.
      channel.wait_if_pending(grad_sends[cur]);
      if (!direct) {
        grad_recv = channel.recv(grad[cur].first(static_cast<size_t>(floats)), step.grad_recv_from,
                                 grad_tag(s - 1));
      }
    }
    // With one rank the share is the finished dk/dv; a direct own block's share starts home.
    float* const accumulator = s == 0 && direct ? home.data() : grad[cur].data();
    const View target_k = d.world == 1 ? dk : pk.k(accumulator, len);
    const View target_v = d.world == 1 ? dv : pk.v(accumulator, len);
    const bool needed = plan.needs(d.rank, step.kv_block);
    if (needed) {
      // Fixed order: the accumulator holds (shares of ranks kv_block .. r-1); the kernel adds
      // this rank's share elementwise. Step 0 starts it with this rank's share; a direct block's
      // share is written alone.
      kernel.overwrite_dkdv = s == 0 || direct;
      kernel.before_dkdv = nullptr;
      if (!received) kernel.before_dkdv = wait_accumulator;
      const std::vector<int64_t>& k_pos = p.kv_blocks->pos[static_cast<size_t>(step.kv_block)];
      const std::vector<int64_t>& k_doc = p.kv_blocks->doc[static_cast<size_t>(step.kv_block)];
      AttentionInputs in{p.q, relay.k(), relay.v(), q_pos, k_pos, q_doc, k_doc};
      in.head_offset = p.head_offset;
      in.total_heads = p.total_heads;
      const double comm0 = options.stats ? options.stats->comm_seconds : 0.0;
      const Stopwatch watch;
      // With delta given the kernel never reads out (kernel.h): dout stands in for it.
      attention_kernel_backward(in, p.params, p.rng, dout, dout, lse, dq_target, target_k, target_v,
                                kernel);
      if (options.stats != nullptr) {
        // The accumulator's wait inside the call is communication, counted as such.
        options.stats->kernel_seconds += watch.seconds() - (options.stats->comm_seconds - comm0);
      }
    } else if (s == 0) {
      // No query of this rank sees its own block: the accumulator (or, with one rank, the
      // result) starts at zero.
      zero_view(target_k);
      zero_view(target_v);
    }
    if (options.stats != nullptr) {
      ++(needed ? options.stats->blocks_computed : options.stats->blocks_skipped);
    }
    if (!received) wait_accumulator();
    if (d.world == 1) continue;
    const int reach = plan.reach(step.kv_block);
    if (s == 0 && reach == 0) {
      // No other rank needs the own block: this share is its finished dk/dv (grad[0] is reused
      // at step 2).
      copy_view(pk.k(static_cast<const float*>(grad[0].data()), d.Sk), dk);
      copy_view(pk.v(static_cast<const float*>(grad[0].data()), d.Sk), dv);
    }
    if (direct) {
      if (s > 0) {
        grad_sends[cur] = channel.send(first(grad[cur], floats), step.kv_block, home_tag(s));
      }
    } else if (s < reach) {
      grad_sends[cur] = channel.send(first(grad[cur], floats), step.grad_send_to, grad_tag(s));
    } else if (s > 0) {
      // The last rank on the block's path: the accumulator is finished; straight home.
      grad_sends[cur] = channel.send(first(grad[cur], floats), step.kv_block, home_tag(s));
    }
  }

  if (d.world > 1 && own_reach > 0) {
    if (share_steps.empty()) {
      // The own block's finished dk/dv, from the last rank on its path.
      channel.wait_recv(home_recv, own_floats, "ring backward: floats of the finished dk/dv");
    }
    // A direct own block: the shares of the ranks that need it, added in ring order.
    for (size_t i = 0; i < share_steps.size(); ++i) {
      channel.wait_recv(share_recvs[i], own_floats, "ring backward: floats of a dk/dv share");
      const std::span<const float> part = share(i);
      for (size_t e = 0; e < part.size(); ++e) home[e] += part[e];
    }
    copy_view(pk.k(static_cast<const float*>(home.data()), d.Sk), dk);
    copy_view(pk.v(static_cast<const float*>(home.data()), d.Sk), dv);
  }
  if (own_dq) copy_view(std::as_const(dq_accumulator).view(), dq);
  relay.finish();
  for (Request& r : grad_sends) channel.wait_if_pending(r);
  // Borrowed through an outer call's lease: free call-owned buffers now, not at its end.
  if (lease != nullptr) {
    lease->done({WorkspaceBuffer::kRelay0, WorkspaceBuffer::kRelay1, WorkspaceBuffer::kOwnKv,
                 WorkspaceBuffer::kGrad0, WorkspaceBuffer::kGrad1, WorkspaceBuffer::kHome,
                 WorkspaceBuffer::kShares});
  }
}

}  // namespace detail

namespace detail {

AttentionGradients ring_call_backward(const CpCall& c, const BackwardState& s) {
  const CpDims& d = c.d;
  const CallTimer call_timer(c.options.stats);
  MemoryCounter* mem = &c.comm.memory();
  const BlockTable q_blocks = BlockTable::of(c.q_seq);
  const BlockTable kv_blocks = BlockTable::of(c.kv_seq);
  AttentionGradients g{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, c.q.dtype, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, c.q.dtype, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dv}, c.q.dtype, mem)};
  const Tensor delta = row_dot(s.dout, s.out, kernel_options(c.comm, c.options), mem);
  const RingProblem p{c.q, c.k, c.v, &q_blocks, &kv_blocks, c.params, c.rng};
  ring_backward(c.comm, p, c.options, s.dout, s.lse, delta.span(), g.dq.view(), g.dk.view(),
                g.dv.view());
  return g;
}

AttentionGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                           ConstView k, ConstView v, ConstView out,
                                           std::span<const float> lse,
                                           const SequenceSharding& q_sharding,
                                           const SequenceSharding& kv_sharding,
                                           const AttentionParams& params, RngState rng,
                                           const CpOptions& options) {
  const CpOptions ring = as_ring(options);
  const CpCall call = validate_cp_call(comm, q, k, v, q_sharding, kv_sharding, params, rng, ring);
  const BackwardState state{dout, out, lse};
  check_backward_state(call, state);
  return ring_call_backward(call, state);
}

}  // namespace detail

}  // namespace cpattn
