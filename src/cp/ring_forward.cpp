// Ring forward: P kernel calls against the k/v blocks travelling around the ring, continuing one
// fp32 online softmax from block to block (SoftmaxCarry), so there is no separate merge pass.
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

  detail::KvRelay relay(channel, d, kv_sharding, detail::RingStream::kForwardKv, k, v);
  const std::vector<int64_t> q_pos = q_sharding.local_positions();
  const std::vector<int64_t> q_doc = q_sharding.local_docs();
  const detail::BlockSkip skip(params, q_pos, q_doc);
  // Which steps compute (a pure function of the shardings): the first starts the online softmax,
  // the last normalises it into res.
  std::vector<bool> computed(static_cast<size_t>(d.world));
  int first = -1, last = -1;
  for (int s = 0; s < d.world; ++s) {
    const int block = ring_step(d.rank, d.world, s).kv_block;
    computed[static_cast<size_t>(s)] =
        !skip.hidden(kv_sharding.local_positions(block), kv_sharding.local_docs(block));
    if (computed[static_cast<size_t>(s)]) {
      if (first < 0) first = s;
      last = s;
    }
  }
  // The blocks continue one online softmax (SoftmaxCarry): res.out holds the unnormalised
  // accumulator between them, row_max/row_sum the running max and sum. One computed block needs
  // no carry: it writes res like a single kernel call.
  const bool carried = first != last;
  Tensor row_max({carried ? d.B : 0, d.Hq, d.Sq}, mem),
      row_sum({carried ? d.B : 0, d.Hq, d.Sq}, mem);
  KernelOptions kernel_options;
  kernel_options.num_threads = options.num_threads;
  kernel_options.interruption_point = [&comm] { comm.throw_if_group_failed(); };
  kernel_options.isa = d.isa;

  for (int s = 0; s < d.world; ++s) {
    const RingStep step = ring_step(d.rank, d.world, s);
    comm.throw_if_group_failed();
    relay.advance(step, s);
    if (!computed[static_cast<size_t>(s)]) {
      if (options.stats != nullptr) ++options.stats->blocks_skipped;
      continue;
    }
    const std::vector<int64_t> k_pos = kv_sharding.local_positions(step.kv_block);
    const std::vector<int64_t> k_doc = kv_sharding.local_docs(step.kv_block);
    const AttentionInputs in{q, relay.k(), relay.v(), q_pos, k_pos, q_doc, k_doc};
    SoftmaxCarry carry;
    if (carried) carry = {row_max.span(), row_sum.span(), s != first, s == last};
    {
      const ScopedSeconds t(options.stats ? &options.stats->kernel_seconds : nullptr);
      attention_kernel_forward(in, params, rng, res.out.view(), res.lse.span(), carry,
                               kernel_options);
    }
    if (options.stats != nullptr) ++options.stats->blocks_computed;
  }
  relay.finish();
  return res;
}

}  // namespace cpattn::unchecked
