// Ring backward: dq accumulates locally; each block's dk/dv accumulator follows its k/v around the
// ring, every rank adding its share in a fixed order, and lands on the block's home rank.
#include <algorithm>
#include <array>
#include <utility>

#include "cp/ring_detail.h"
#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn::unchecked {

namespace {

std::span<float> first(Tensor& t, int64_t n) { return t.span().first(static_cast<size_t>(n)); }
std::span<const float> first(const Tensor& t, int64_t n) {
  return t.span().first(static_cast<size_t>(n));
}

}  // namespace

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
  detail::RingChannel channel(comm, options.stats);
  MemoryCounter* mem = &comm.memory();
  AttentionGradients g{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dv}, mem)};
  // D_i = <dout_i, out_i>, computed once for every block (FlashAttention-2 Alg. 2 line 4).
  Tensor delta({d.B, d.Hq, d.Sq}, mem);
  KernelOptions delta_options;
  delta_options.num_threads = options.num_threads;
  delta_options.isa = d.isa;
  attention_kernel_delta(dout, out, delta.span(), delta_options);

  // Besides the k/v relay: grad[2], the dk/dv accumulators (each sized for the largest block,
  // packed dk|dv as PackedKv): grad[s % 2] is received at step s while this rank computes, and
  // the kernel adds this rank's share straight into it (BackwardOptions::before_dkdv waits for
  // the accumulator just before the first dk/dv write, so the transfer overlaps the work before
  // it); it is then sent on while grad[(s + 1) % 2] may still be in flight from step s - 1. At
  // step 0 the kernel writes its share of the own block into grad[0] (overwrite_dkdv).
  detail::KvRelay relay(channel, d, kv_sharding, detail::RingStream::kBackwardKv, k, v);
  const detail::PackedKv pk{d.B, d.Hkv, d.Dqk, d.Dv};
  const int64_t ring_floats = d.world > 1 ? pk.floats(d.max_block) : 0;
  std::array<Tensor, 2> grad{Tensor({ring_floats}, mem), Tensor({ring_floats}, mem)};

  const std::vector<int64_t> q_pos = q_sharding.local_positions();
  const std::vector<int64_t> q_doc = q_sharding.local_docs();
  const detail::BlockSkip skip(params, q_pos, q_doc);
  std::array<Request, 2> grad_sends;
  Request grad_recv;
  BackwardOptions kernel_options;
  kernel_options.num_threads = options.num_threads;
  kernel_options.interruption_point = [&comm] { comm.throw_if_group_failed(); };
  kernel_options.isa = d.isa;
  kernel_options.accumulate = true;  // dq sums over blocks (g.dq starts at zero)
  kernel_options.delta = delta.span();
  const auto grad_tag = [](int step) {
    return detail::ring_tag(detail::RingStream::kBackwardGrad, step);
  };
  int home = 0;  // the buffer that ends up holding this rank's own finished dk/dv

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    const int cur = s % 2;
    comm.throw_if_group_failed();
    relay.advance(step, s);
    const int64_t len = relay.length();
    const int64_t floats = pk.floats(len);
    bool received = step.grad_recv_from < 0;
    const auto wait_accumulator = [&] {
      channel.wait_recv(grad_recv, floats, "ring backward: floats of the dk/dv accumulator");
      received = true;
    };
    if (step.grad_recv_from >= 0) {
      // grad[cur] was sent on at step s - 2; the sender of this accumulator finished step s - 1.
      channel.wait_if_pending(grad_sends[cur]);
      grad_recv = channel.recv(first(grad[cur], floats), step.grad_recv_from, grad_tag(s - 1));
    }
    // With one rank the share is the finished dk/dv.
    const View target_k = d.world == 1 ? g.dk.view() : pk.k(grad[cur].data(), len);
    const View target_v = d.world == 1 ? g.dv.view() : pk.v(grad[cur].data(), len);
    const std::vector<int64_t> k_pos = kv_sharding.local_positions(step.kv_block);
    const std::vector<int64_t> k_doc = kv_sharding.local_docs(step.kv_block);
    const bool hidden = skip.hidden(k_pos, k_doc);
    if (!hidden) {
      // Fixed order: the accumulator holds (shares of ranks kv_block .. r-1); the kernel adds
      // this rank's share elementwise. Step 0 starts it with this rank's share (grad[0] is
      // zero when the own block is hidden).
      kernel_options.overwrite_dkdv = s == 0;
      kernel_options.before_dkdv = nullptr;
      if (!received) kernel_options.before_dkdv = wait_accumulator;
      const AttentionInputs in{q, relay.k(), relay.v(), q_pos, k_pos, q_doc, k_doc};
      const double comm0 = options.stats ? options.stats->comm_seconds : 0.0;
      const Stopwatch watch;
      attention_kernel_backward(in, params, rng, dout, out, lse, g.dq.view(), target_k, target_v,
                                kernel_options);
      if (options.stats != nullptr) {
        // The accumulator's wait inside the call is communication, counted as such.
        options.stats->kernel_seconds += watch.seconds() - (options.stats->comm_seconds - comm0);
      }
    }
    if (options.stats != nullptr) {
      ++(hidden ? options.stats->blocks_skipped : options.stats->blocks_computed);
    }
    if (!received) wait_accumulator();
    if (step.grad_send_to >= 0) {
      grad_sends[cur] =
          channel.send(first(std::as_const(grad[cur]), floats), step.grad_send_to, grad_tag(s));
    }
    if (step.home_grad_recv_from >= 0) {
      // The own block's finished accumulator, sent by the rank that added the last share at its
      // step P - 1, lands in the buffer not used at this step.
      home = 1 - cur;
      channel.wait_if_pending(grad_sends[home]);
      Request r =
          channel.recv(first(grad[home], pk.floats(d.Sk)), step.home_grad_recv_from, grad_tag(s));
      channel.wait_recv(r, pk.floats(d.Sk), "ring backward: floats of the finished dk/dv");
    }
  }

  if (d.world > 1) {
    copy_view(pk.k(std::as_const(grad[home]).data(), d.Sk), g.dk.view());
    copy_view(pk.v(std::as_const(grad[home]).data(), d.Sk), g.dv.view());
  }
  relay.finish();
  for (Request& r : grad_sends) channel.wait_if_pending(r);
  return g;
}

}  // namespace cpattn::unchecked
