// Ring backward: dq accumulates locally; each block's dk/dv accumulator follows its k/v around the
// ring, every rank adding its share in a fixed order, and lands on the block's home rank.
#include <algorithm>
#include <array>
#include <utility>

#include "cp/ring_detail.h"
#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn {

namespace {

// D_i = <dout_i, out_i> in fp32, [B, Hq, Sq] (FlashAttention-2 backward, Alg. 2 line 4), computed
// once instead of once per block.
Tensor row_dot(ConstView dout, ConstView out, MemoryCounter* mem) {
  const int64_t B = out.shape[0], S = out.shape[1], H = out.shape[2], D = out.shape[3];
  Tensor delta({B, H, S}, mem);
  float* p = delta.data();
  const int64_t sd = dout.stride[3], so = out.stride[3];
  // Rows in (b, i, h) order: the memory order of a dense BSHD tensor.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const float* x = &dout(b, i, h, 0);
        const float* y = &out(b, i, h, 0);
        float acc = 0.0f;
        for (int64_t c = 0; c < D; ++c) acc += x[c * sd] * y[c * so];
        p[(b * H + h) * S + i] = acc;
      }
    }
  }
  return delta;
}

void check_like_out(const char* name, ConstView t, const std::array<int64_t, 4>& want) {
  CPATTN_CHECK(t.shape == want, ErrorCode::kShapeMismatch, name,
               " must have shape [B, Sq_local, Hq, Dv] = [", want[0], ", ", want[1], ", ", want[2],
               ", ", want[3], "], got [", t.shape[0], ", ", t.shape[1], ", ", t.shape[2], ", ",
               t.shape[3], "]");
}

std::span<float> first(Tensor& t, int64_t n) { return t.span().first(static_cast<size_t>(n)); }
std::span<const float> first(const Tensor& t, int64_t n) {
  return t.span().first(static_cast<size_t>(n));
}

}  // namespace

RingGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, ConstView out, std::span<const float> lse,
                                      const SequenceSharding& q_sharding,
                                      const SequenceSharding& kv_sharding,
                                      const AttentionParams& params, RngState rng,
                                      const RingOptions& options) {
  const detail::RingDims d =
      detail::validate_ring_call(comm, q, k, v, q_sharding, kv_sharding, params, options);
  check_like_out("dout", dout, {d.B, d.Sq, d.Hq, d.Dv});
  check_like_out("out", out, {d.B, d.Sq, d.Hq, d.Dv});
  CPATTN_CHECK_EQ(static_cast<int64_t>(lse.size()), d.B * d.Hq * d.Sq, ErrorCode::kShapeMismatch,
                  "lse length (B * Hq * Sq_local)");
  const detail::CallTimer call_timer(options.stats);
  detail::RingChannel channel(comm, options.stats);
  MemoryCounter* mem = &comm.memory();
  RingGradients g{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, mem), Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, mem),
                  Tensor({d.B, d.Sk, d.Hkv, d.Dv}, mem)};
  const Tensor delta = row_dot(dout, out, mem);

  // Buffers (each sized for the largest block, packed k|v or dk|dv as PackedKv describes):
  //   kv[2]    k/v double buffer, as in the forward
  //   grad[2]  dk/dv accumulators: grad[s % 2] is received, completed and sent on at step s while
  //            grad[(s + 1) % 2] may still be in flight from step s - 1
  //   share    this rank's dk/dv share of the current block (zeroed per step), added to the
  //            received accumulator afterwards, so the kernel never waits for the accumulator
  const detail::PackedKv pk{d.B, d.Hkv, d.Dqk, d.Dv};
  const int64_t buf_floats = pk.floats(d.max_block);
  const int64_t ring_floats = d.world > 1 ? buf_floats : 0;
  std::array<Tensor, 2> kv{Tensor({buf_floats}, mem), Tensor({ring_floats}, mem)};
  std::array<Tensor, 2> grad{Tensor({buf_floats}, mem), Tensor({ring_floats}, mem)};
  Tensor share({ring_floats}, mem);
  detail::pack_kv(pk, k, v, kv[0].data());

  const std::vector<int64_t> q_pos = q_sharding.local_positions();
  const std::vector<int64_t> q_doc = q_sharding.local_docs();
  std::array<Request, 2> kv_sends, grad_sends;
  Request kv_recv, grad_recv;
  BackwardOptions kernel_options;
  kernel_options.num_threads = options.num_threads;
  kernel_options.accumulate = true;  // dq sums over blocks; share and grad[0] start at zero
  kernel_options.delta = delta.span();

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    const int cur = s % 2;
    const int64_t len = kv_sharding.local_length(step.kv_block);
    const int64_t floats = pk.floats(len);
    if (s > 0) channel.wait_recv(kv_recv, floats, "ring backward: floats of the k/v block");
    if (step.kv_send_to >= 0) {
      channel.wait_if_pending(kv_sends[1 - cur]);
      const int tag = detail::ring_tag(detail::RingStream::kBackwardKv, s);
      kv_sends[cur] = channel.send(first(std::as_const(kv[cur]), floats), step.kv_send_to, tag);
      const int64_t next = pk.floats(kv_sharding.local_length(step.next_kv_block));
      kv_recv = channel.recv(first(kv[1 - cur], next), step.kv_recv_from, tag);
    }
    if (step.grad_recv_from >= 0) {
      // grad[cur] was sent on at step s - 2; the sender of this accumulator finished step s - 1.
      channel.wait_if_pending(grad_sends[cur]);
      grad_recv = channel.recv(first(grad[cur], floats), step.grad_recv_from,
                               detail::ring_tag(detail::RingStream::kBackwardGrad, s - 1));
    }
    // Step 0 starts the accumulator of the own block with this rank's share directly.
    Tensor& target = s == 0 ? grad[0] : share;
    const std::vector<int64_t> k_pos = kv_sharding.local_positions(step.kv_block);
    const std::vector<int64_t> k_doc = kv_sharding.local_docs(step.kv_block);
    const bool hidden = detail::block_hidden(q_pos, k_pos, q_doc, k_doc, params);
    if (!hidden) {
      if (s > 0) std::fill_n(target.data(), floats, 0.0f);
      const AttentionInputs in{
          q, pk.k(kv[cur].data(), len), pk.v(kv[cur].data(), len), q_pos, k_pos, q_doc, k_doc};
      const detail::ScopedSeconds t(options.stats ? &options.stats->kernel_seconds : nullptr);
      attention_kernel_backward(in, params, rng, dout, out, lse, g.dq.view(),
                                pk.k(target.data(), len), pk.v(target.data(), len), kernel_options);
    }
    if (options.stats != nullptr)
      ++(hidden ? options.stats->blocks_skipped : options.stats->blocks_computed);
    if (s > 0) {
      channel.wait_recv(grad_recv, floats, "ring backward: floats of the dk/dv accumulator");
      if (!hidden) {
        // Fixed order: (shares of ranks kv_block .. r-1) + share of r, elementwise.
        float* acc = grad[cur].data();
        const float* mine = share.data();
        for (int64_t i = 0; i < floats; ++i) acc[i] += mine[i];
      }
    }
    if (step.grad_send_to >= 0) {
      grad_sends[cur] = channel.send(first(std::as_const(grad[cur]), floats), step.grad_send_to,
                                     detail::ring_tag(detail::RingStream::kBackwardGrad, s));
    }
  }

  // The own block's finished accumulator: with P > 1 it arrives from rank r - 1, which sent it at
  // its last step; with P = 1 it is grad[0] already.
  int home = 0;
  if (d.world > 1) {
    home = d.world % 2;  // the buffer not used at step P - 1
    channel.wait_if_pending(grad_sends[home]);
    Request r = channel.recv(first(grad[home], pk.floats(d.Sk)), (d.rank + d.world - 1) % d.world,
                             detail::ring_tag(detail::RingStream::kBackwardGrad, d.world - 1));
    channel.wait_recv(r, pk.floats(d.Sk), "ring backward: floats of the finished dk/dv");
  }
  detail::copy_view(pk.k(grad[home].data(), d.Sk), g.dk.view());
  detail::copy_view(pk.v(grad[home].data(), d.Sk), g.dv.view());
  for (Request& r : kv_sends) channel.wait_if_pending(r);
  for (Request& r : grad_sends) channel.wait_if_pending(r);
  return g;
}

RingGradients ring_attention_backward(Communicator& comm, ConstView dout, ConstView q, ConstView k,
                                      ConstView v, ConstView out, std::span<const float> lse,
                                      const SequenceSharding& sharding,
                                      const AttentionParams& params, RngState rng,
                                      const RingOptions& options) {
  return ring_attention_backward(comm, dout, q, k, v, out, lse, sharding, sharding, params, rng,
                                 options);
}

}  // namespace cpattn
