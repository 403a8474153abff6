// Validation, channel, timing, k/v relay and block-skip helpers of the ring (ring_detail.h).
#include "cp/ring_detail.h"

#include <algorithm>
#include <utility>

#include "cpattn/error.h"

namespace cpattn::detail {

RingDims validate_ring_call(const Communicator& comm, ConstView q, ConstView k, ConstView v,
                            const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                            const AttentionParams& params, const RingOptions& options) {
  q_sharding.validate();
  kv_sharding.validate();
  RingDims d;
  d.world = comm.size();
  d.rank = comm.rank();
  CPATTN_CHECK_EQ(q_sharding.cp_size, d.world, ErrorCode::kInvalidArgument,
                  "q sharding cp_size (communicator size)");
  CPATTN_CHECK_EQ(kv_sharding.cp_size, d.world, ErrorCode::kInvalidArgument,
                  "kv sharding cp_size (communicator size)");
  CPATTN_CHECK_EQ(q_sharding.cp_rank, d.rank, ErrorCode::kInvalidArgument,
                  "q sharding cp_rank (communicator rank)");
  CPATTN_CHECK_EQ(kv_sharding.cp_rank, d.rank, ErrorCode::kInvalidArgument,
                  "kv sharding cp_rank (communicator rank)");
  CPATTN_CHECK(q_sharding.docs.empty() == kv_sharding.docs.empty(), ErrorCode::kInvalidArgument,
               "document ids must be given for both q and kv shardings or for neither");
  CPATTN_CHECK(options.num_threads >= 1, ErrorCode::kInvalidArgument,
               "RingOptions.num_threads: expected >= 1, got ", options.num_threads);

  d.B = q.shape[0];
  d.Sq = q_sharding.local_length();
  d.Hq = q.shape[2];
  d.Dqk = q.shape[3];
  d.Sk = kv_sharding.local_length();
  d.Hkv = k.shape[2];
  d.Dv = v.shape[3];
  check_view(q, "q", "[B, Sq_local, Hq, Dqk]", {d.B, d.Sq, d.Hq, d.Dqk});
  check_view(k, "k", "[B, Sk_local, Hkv, Dqk]", {d.B, d.Sk, d.Hkv, d.Dqk});
  check_view(v, "v", "[B, Sk_local, Hkv, Dv]", {d.B, d.Sk, d.Hkv, d.Dv});
  CPATTN_CHECK(d.Hkv >= 1 && d.Hq % d.Hkv == 0, ErrorCode::kShapeMismatch,
               "Hq must be a multiple of Hkv >= 1, got Hq ", d.Hq, ", Hkv ", d.Hkv);
  CPATTN_CHECK(d.Dqk >= 1 && d.Dv >= 1, ErrorCode::kShapeMismatch,
               "head dims must be >= 1, got Dqk ", d.Dqk, ", Dv ", d.Dv);
  // Checked here although the kernel checks them too: a rank whose blocks are all masked never
  // calls the kernel, and every rank must reject a bad call alike, before any message.
  resolve_params(params, d.Dqk);
  d.isa = resolve_isa(options.isa);
  for (int r = 0; r < d.world; ++r) {
    d.max_block = std::max(d.max_block, kv_sharding.local_length(r));
  }
  return d;
}

Request RingChannel::send(std::span<const float> data, int dest, int tag) {
  const ScopedSeconds t(comm_seconds());
  if (stats_ != nullptr) {
    ++stats_->messages_sent;
    stats_->bytes_sent += static_cast<int64_t>(data.size_bytes());
  }
  return comm_.isend(data, dest, tag);
}

Request RingChannel::recv(std::span<float> data, int src, int tag) {
  const ScopedSeconds t(comm_seconds());
  return comm_.irecv(data, src, tag);
}

void RingChannel::wait_recv(Request& r, int64_t floats, const char* what) {
  size_t got = 0;
  {
    const ScopedSeconds t(comm_seconds());
    got = r.wait();
  }
  CPATTN_CHECK_EQ(got, static_cast<size_t>(floats) * sizeof(float), ErrorCode::kCommunication,
                  what);
}

void RingChannel::wait_if_pending(Request& r) {
  if (!r.valid()) return;
  const ScopedSeconds t(comm_seconds());
  r.wait();
}

CallTimer::CallTimer(RingStats* stats) : stats_(stats) {
  if (stats_ == nullptr) return;
  kernel0_ = stats_->kernel_seconds;
  comm0_ = stats_->comm_seconds;
}

CallTimer::~CallTimer() {
  if (stats_ == nullptr) return;
  stats_->other_seconds +=
      watch_.seconds() - (stats_->kernel_seconds - kernel0_) - (stats_->comm_seconds - comm0_);
}

KvRelay::KvRelay(RingChannel& channel, const RingDims& d, const SequenceSharding& kv_sharding,
                 RingStream stream, ConstView k, ConstView v)
    : channel_(channel),
      kv_(kv_sharding),
      stream_(stream),
      world_(d.world),
      own_k_(k),
      own_v_(v),
      pk_{d.B, d.Hkv, d.Dqk, d.Dv},
      // Both buffers hold the largest block of the group; with one rank nothing travels.
      buf_{Tensor({d.world > 1 ? pk_.floats(d.max_block) : 0}, &channel.memory()),
           Tensor({d.world > 1 ? pk_.floats(d.max_block) : 0}, &channel.memory())},
      len_(d.Sk) {
  if (alone()) return;
  copy_view(k, pk_.k(buf_[0].data(), len_));
  copy_view(v, pk_.v(buf_[0].data(), len_));
}

void KvRelay::advance(const RingStep& step, int s) {
  cur_ = s % 2;
  len_ = kv_.local_length(step.kv_block);
  const size_t floats = static_cast<size_t>(pk_.floats(len_));
  if (s > 0) channel_.wait_recv(recv_, pk_.floats(len_), "ring: floats of the k/v block");
  if (step.kv_send_to < 0) return;
  // The buffer about to receive block s + 1 was relayed at step s - 1: that send must be done.
  const size_t other = static_cast<size_t>(1 - cur_);
  channel_.wait_if_pending(sends_[other]);
  const int tag = ring_tag(stream_, s);
  sends_[static_cast<size_t>(cur_)] = channel_.send(
      std::as_const(buf_[static_cast<size_t>(cur_)]).span().first(floats), step.kv_send_to, tag);
  const int64_t next = pk_.floats(kv_.local_length(step.next_kv_block));
  recv_ =
      channel_.recv(buf_[other].span().first(static_cast<size_t>(next)), step.kv_recv_from, tag);
}

void KvRelay::finish() {
  for (Request& r : sends_) channel_.wait_if_pending(r);
}

BlockSkip::BlockSkip(const AttentionParams& params, std::span<const int64_t> q_pos,
                     std::span<const int64_t> q_doc)
    : rule_(params, !q_doc.empty()), q_(block_range(q_pos, q_doc)) {}

bool BlockSkip::hidden(std::span<const int64_t> k_pos, std::span<const int64_t> k_doc) const {
  return rule_.classify(q_, block_range(k_pos, k_doc)) == BlockVisibility::kHidden;
}

}  // namespace cpattn::detail
