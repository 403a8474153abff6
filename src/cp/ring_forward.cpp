// Ring forward: P kernel calls against the k/v blocks travelling around the ring, merged in fp32.
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "cp/ring_detail.h"
#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn {

RingForwardResult ring_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                         const SequenceSharding& q_sharding,
                                         const SequenceSharding& kv_sharding,
                                         const AttentionParams& params, RngState rng,
                                         const RingOptions& options) {
  const detail::RingDims d =
      detail::validate_ring_call(comm, q, k, v, q_sharding, kv_sharding, params, options);
  const detail::CallTimer call_timer(options.stats);
  detail::RingChannel channel(comm, options.stats);
  MemoryCounter* mem = &comm.memory();
  RingForwardResult res{Tensor({d.B, d.Sq, d.Hq, d.Dv}, mem), Tensor({d.B, d.Hq, d.Sq}, mem), rng};
  std::fill(res.lse.span().begin(), res.lse.span().end(), -std::numeric_limits<float>::infinity());
  // Per-step partial result, merged into res after each kernel call.
  Tensor part_out({d.B, d.Sq, d.Hq, d.Dv}, mem);
  Tensor part_lse({d.B, d.Hq, d.Sq}, mem);

  // Double buffer of travelling k/v blocks: at step s, buf[s % 2] is computed on and relayed while
  // block s + 1 arrives in buf[(s + 1) % 2]. Both hold the largest block of the group.
  const detail::PackedKv pk{d.B, d.Hkv, d.Dqk, d.Dv};
  const int64_t buf_floats = pk.floats(d.max_block);
  std::array<Tensor, 2> buf{Tensor({buf_floats}, mem), Tensor({d.world > 1 ? buf_floats : 0}, mem)};
  detail::pack_kv(pk, k, v, buf[0].data());

  const std::vector<int64_t> q_pos = q_sharding.local_positions();
  const std::vector<int64_t> q_doc = q_sharding.local_docs();
  std::array<Request, 2> sends;
  Request recv;
  const KernelOptions kernel_options{options.num_threads};

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    const int cur = s % 2;
    const int64_t len = kv_sharding.local_length(step.kv_block);
    if (s > 0) channel.wait_recv(recv, pk.floats(len), "ring forward: floats of the k/v block");
    if (step.kv_send_to >= 0) {
      // The buffer about to receive block s + 1 was relayed at step s - 1: that send must be done.
      channel.wait_if_pending(sends[1 - cur]);
      const int tag = detail::ring_tag(detail::RingStream::kForwardKv, s);
      const std::span<const float> block = std::as_const(buf[cur]).span();
      sends[cur] =
          channel.send(block.first(static_cast<size_t>(pk.floats(len))), step.kv_send_to, tag);
      const int64_t next = pk.floats(kv_sharding.local_length(step.next_kv_block));
      recv = channel.recv(buf[1 - cur].span().first(static_cast<size_t>(next)), step.kv_recv_from,
                          tag);
    }
    const std::vector<int64_t> k_pos = kv_sharding.local_positions(step.kv_block);
    const std::vector<int64_t> k_doc = kv_sharding.local_docs(step.kv_block);
    if (detail::block_hidden(q_pos, k_pos, q_doc, k_doc, params)) {
      if (options.stats != nullptr) ++options.stats->blocks_skipped;
      continue;
    }
    const AttentionInputs in{
        q, pk.k(buf[cur].data(), len), pk.v(buf[cur].data(), len), q_pos, k_pos, q_doc, k_doc};
    {
      const detail::ScopedSeconds t(options.stats ? &options.stats->kernel_seconds : nullptr);
      attention_kernel_forward(in, params, rng, part_out.view(), part_lse.span(), kernel_options);
    }
    if (options.stats != nullptr) ++options.stats->blocks_computed;
    merge_attention_partials(res.out.view(), res.lse.span(), part_out.view(), part_lse.span());
  }
  for (Request& r : sends) channel.wait_if_pending(r);
  return res;
}

RingForwardResult ring_attention_forward(Communicator& comm, ConstView q, ConstView k, ConstView v,
                                         const SequenceSharding& sharding,
                                         const AttentionParams& params, RngState rng,
                                         const RingOptions& options) {
  return ring_attention_forward(comm, q, k, v, sharding, sharding, params, rng, options);
}

}  // namespace cpattn
