// Ring backward: dq accumulates locally; each block's dk/dv accumulator follows its k/v around the
// ring, every rank on the block's path adding its share in a fixed order, and goes home from the
// last rank that needs the block.
#include <algorithm>
#include <array>
#include <utility>

#include "cp/ring_core.h"
#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn {

namespace {

std::span<float> first(Tensor& t, int64_t n) { return t.span().first(static_cast<size_t>(n)); }
std::span<const float> first(const Tensor& t, int64_t n) {
  return t.span().first(static_cast<size_t>(n));
}

}  // namespace

namespace detail {

void ring_backward(Communicator& comm, const RingProblem& p, const RingOptions& options,
                   ConstView dout, std::span<const float> lse, std::span<const float> delta,
                   View dq, View dk, View dv) {
  const RingDims d = ring_dims(comm, p);
  RingChannel channel(comm, options.stats);
  MemoryCounter* mem = &comm.memory();
  zero_view(dq);  // the kernel accumulates dq over the blocks
  if (d.world == 1) {
    zero_view(dk);
    zero_view(dv);
  }

  // Buffers besides the k/v relay (each sized for the largest block, packed dk|dv as PackedKv):
  //   grad[2]  dk/dv accumulators: grad[s % 2] is received, completed and sent on at step s while
  //            grad[(s + 1) % 2] may still be in flight from step s - 1
  //   share    this rank's dk/dv share of the current block (zeroed per step), added to the
  //            received accumulator afterwards, so the kernel never waits for the accumulator
  //   home     this rank's own finished accumulator, received from the last rank on its path
  //            (its receive is posted before step 0, so that send never waits for this rank)
  const RelayPlan plan(p.params, *p.q_blocks, *p.kv_blocks, options.document_aware);
  KvRelay relay(channel, d, *p.kv_blocks, plan, RingStream::kBackwardKv, p.k, p.v);
  const PackedKv pk{d.B, d.Hkv, d.Dqk, d.Dv};
  const int64_t ring_floats = d.world > 1 ? pk.floats(d.max_block) : 0;
  std::array<Tensor, 2> grad{Tensor({ring_floats}, mem), Tensor({ring_floats}, mem)};
  Tensor share({ring_floats}, mem);
  const int own_reach = plan.reach(d.rank);
  Tensor home({d.world > 1 && own_reach > 0 ? pk.floats(d.Sk) : 0}, mem);
  if (options.stats != nullptr) {
    // The plain ring relays P - 1 k/v blocks (as in the forward) and sends P accumulators.
    for (int s = 0; s < d.world && d.world > 1; ++s) {
      const int64_t bytes = static_cast<int64_t>(sizeof(float)) *
                            pk.floats(p.kv_blocks->length(ring_step(d.rank, d.world, s).kv_block));
      options.stats->bytes_sent_plain_ring += s + 1 < d.world ? 2 * bytes : bytes;
    }
  }

  const std::vector<int64_t>& q_pos = p.q_blocks->pos[static_cast<size_t>(d.rank)];
  const std::vector<int64_t>& q_doc = p.q_blocks->doc[static_cast<size_t>(d.rank)];
  std::array<Request, 2> grad_sends;
  Request grad_recv, home_recv;
  BackwardOptions kernel_options;
  kernel_options.num_threads = options.num_threads;
  kernel_options.interruption_point = [&comm] { comm.throw_if_group_failed(); };
  kernel_options.accumulate = true;  // dq sums over blocks; share and grad[0] start at zero
  kernel_options.delta = delta;
  const auto grad_tag = [](int step) { return ring_tag(RingStream::kBackwardGrad, step); };
  const auto home_tag = [](int step) { return ring_tag(RingStream::kBackwardHome, step); };
  if (d.world > 1 && own_reach > 0) {
    home_recv = channel.recv(home.span(), (d.rank + own_reach) % d.world, home_tag(own_reach));
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
    if (s > 0) {
      // grad[cur] was sent on at step s - 2; the sender of this accumulator finished step s - 1.
      channel.wait_if_pending(grad_sends[cur]);
      grad_recv = channel.recv(first(grad[cur], floats), step.grad_recv_from, grad_tag(s - 1));
    }
    // Step 0 starts the accumulator of the own block with this rank's share directly; with one
    // rank the share is the finished dk/dv.
    Tensor& target = s == 0 ? grad[0] : share;
    const View target_k = d.world == 1 ? dk : pk.k(target.data(), len);
    const View target_v = d.world == 1 ? dv : pk.v(target.data(), len);
    const bool needed = plan.needs(d.rank, step.kv_block);
    if (needed) {
      if (s > 0) std::fill_n(target.data(), floats, 0.0f);
      const std::vector<int64_t>& k_pos = p.kv_blocks->pos[static_cast<size_t>(step.kv_block)];
      const std::vector<int64_t>& k_doc = p.kv_blocks->doc[static_cast<size_t>(step.kv_block)];
      AttentionInputs in{p.q, relay.k(), relay.v(), q_pos, k_pos, q_doc, k_doc};
      in.head_offset = p.head_offset;
      in.total_heads = p.total_heads;
      // With delta given the kernel never reads out (kernel.h): dout stands in for it.
      const ScopedSeconds t(options.stats ? &options.stats->kernel_seconds : nullptr);
      attention_kernel_backward(in, p.params, p.rng, dout, dout, lse, dq, target_k, target_v,
                                kernel_options);
    } else if (s == 0 && d.world > 1) {
      std::fill_n(target.data(), floats, 0.0f);  // the own block's accumulator starts at zero
    }
    if (options.stats != nullptr) {
      ++(needed ? options.stats->blocks_computed : options.stats->blocks_skipped);
    }
    if (s > 0) {
      channel.wait_recv(grad_recv, floats, "ring backward: floats of the dk/dv accumulator");
      if (needed) {
        // Fixed order: (shares of ranks kv_block .. r-1) + share of r, elementwise.
        float* acc = grad[cur].data();
        const float* mine = share.data();
        for (int64_t i = 0; i < floats; ++i) acc[i] += mine[i];
      }
    }
    if (d.world == 1) continue;
    const int reach = plan.reach(step.kv_block);
    if (s == 0 && reach == 0) {
      // No other rank needs the own block: this share is its finished dk/dv (grad[0] is reused
      // at step 2).
      copy_view(pk.k(std::as_const(grad[0]).data(), d.Sk), dk);
      copy_view(pk.v(std::as_const(grad[0]).data(), d.Sk), dv);
    }
    if (s < reach) {
      grad_sends[cur] =
          channel.send(first(std::as_const(grad[cur]), floats), step.grad_send_to, grad_tag(s));
    } else if (s > 0) {
      // The last rank on the block's path: the accumulator is finished; straight home.
      grad_sends[cur] =
          channel.send(first(std::as_const(grad[cur]), floats), step.kv_block, home_tag(s));
    }
  }

  if (d.world > 1 && own_reach > 0) {
    // The own block's finished dk/dv, from the last rank on its path.
    channel.wait_recv(home_recv, pk.floats(d.Sk), "ring backward: floats of the finished dk/dv");
    copy_view(pk.k(std::as_const(home).data(), d.Sk), dk);
    copy_view(pk.v(std::as_const(home).data(), d.Sk), dv);
  }
  relay.finish();
  for (Request& r : grad_sends) channel.wait_if_pending(r);
}

}  // namespace detail

namespace unchecked {

AttentionGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q,
                                           ConstView k, ConstView v, ConstView out,
                                           std::span<const float> lse,
                                           const SequenceSharding& q_sharding,
                                           const SequenceSharding& kv_sharding,
                                           const AttentionParams& params, RngState rng,
                                           const RingOptions& options) {
  const detail::RingDims d =
      detail::validate_ring_call(comm, q, k, v, q_sharding, kv_sharding, params, options);
  check_view(dout, "dout", "[B, Sq_local, Hq, Dv]", {d.B, d.Sq, d.Hq, d.Dv});
  check_view(out, "out", "[B, Sq_local, Hq, Dv]", {d.B, d.Sq, d.Hq, d.Dv});
  CPATTN_CHECK_EQ(static_cast<int64_t>(lse.size()), d.B * d.Hq * d.Sq, ErrorCode::kShapeMismatch,
                  "lse length (B * Hq * Sq_local)");
  const detail::CallTimer call_timer(options.stats);
  MemoryCounter* mem = &comm.memory();
  const detail::BlockTable q_blocks = detail::BlockTable::of(q_sharding);
  const detail::BlockTable kv_blocks = detail::BlockTable::of(kv_sharding);
  AttentionGradients g{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dv}, mem)};
  const Tensor delta = detail::row_dot(dout, out, mem);
  const detail::RingProblem p{q, k, v, &q_blocks, &kv_blocks, params, rng};
  detail::ring_backward(comm, p, options, dout, lse, delta.span(), g.dq.view(), g.dk.view(),
                        g.dv.view());
  return g;
}

}  // namespace unchecked

}  // namespace cpattn
