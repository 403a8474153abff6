// Ring forward: P kernel calls against the k/v blocks travelling around the ring, merged in fp32.
#include <algorithm>
#include <limits>

#include "cp/ring_detail.h"
#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn::unchecked {

void check_ring_arguments(const Communicator& comm, ConstView q, ConstView k, ConstView v,
                          const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                          const AttentionParams& params, const RingOptions& options) {
  detail::validate_ring_call(comm, q, k, v, q_sharding, kv_sharding, params, options);
}

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
  // Per-step partial result, merged into res after each kernel call but the first (which writes
  // res itself: merging into an empty result is a copy). Not needed with one rank.
  Tensor part_out({d.world > 1 ? d.B : 0, d.Sq, d.Hq, d.Dv}, mem);
  Tensor part_lse({d.world > 1 ? d.B : 0, d.Hq, d.Sq}, mem);
  bool first_block = true;

  detail::KvRelay relay(channel, d, kv_sharding, detail::RingStream::kForwardKv, k, v);
  const std::vector<int64_t> q_pos = q_sharding.local_positions();
  const std::vector<int64_t> q_doc = q_sharding.local_docs();
  const detail::BlockSkip skip(params, q_pos, q_doc);
  KernelOptions kernel_options;
  kernel_options.num_threads = options.num_threads;
  kernel_options.interruption_point = [&comm] { comm.throw_if_group_failed(); };

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    comm.throw_if_group_failed();
    relay.advance(step, s);
    const std::vector<int64_t> k_pos = kv_sharding.local_positions(step.kv_block);
    const std::vector<int64_t> k_doc = kv_sharding.local_docs(step.kv_block);
    if (skip.hidden(k_pos, k_doc)) {
      if (options.stats != nullptr) ++options.stats->blocks_skipped;
      continue;
    }
    const AttentionInputs in{q, relay.k(), relay.v(), q_pos, k_pos, q_doc, k_doc};
    {
      const ScopedSeconds t(options.stats ? &options.stats->kernel_seconds : nullptr);
      attention_kernel_forward(in, params, rng, first_block ? res.out.view() : part_out.view(),
                               first_block ? res.lse.span() : part_lse.span(), kernel_options);
    }
    if (options.stats != nullptr) ++options.stats->blocks_computed;
    if (!first_block) {
      merge_attention_partials(res.out.view(), res.lse.span(), part_out.view(), part_lse.span());
    }
    first_block = false;
  }
  relay.finish();
  return res;
}

}  // namespace cpattn::unchecked
