// Private pieces of the ring forward and backward: argument validation, message tags, the
// channel that times and counts messages, the packed k/v block and the k/v relay both passes use.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/mask.h"
#include "cpattn/ring.h"
#include "cpattn/stopwatch.h"

namespace cpattn::detail {

/// Sizes of one ring call, checked once by validate_ring_call (kernels and helpers trust them).
struct RingDims {
  int64_t B = 0, Sq = 0, Sk = 0, Hq = 0, Hkv = 0, Dqk = 0, Dv = 0;
  int64_t max_block = 0;  ///< the largest Sk_r over all ranks (buffer size of a travelling block)
  int rank = 0, world = 1;
  Isa isa = Isa::kGeneric;  ///< RingOptions::isa resolved (resolve_isa), for every kernel call
};

/// The single validation layer of the ring: group vs shardings, shapes vs local lengths,
/// resolve_params and the options (resolve_isa included). Throws Error(kShapeMismatch |
/// kInvalidArgument) naming expected vs got. Every rank checks the same things, so a bad call fails
/// on every rank before any message.
RingDims validate_ring_call(const Communicator& comm, ConstView q, ConstView k, ConstView v,
                            const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                            const AttentionParams& params, const RingOptions& options);

/// Message tags: one kind per stream, the step in the low bits (readable in timeout messages:
/// "tag 8194" = k/v of the backward, step 2).
enum class RingStream { kForwardKv = 1, kBackwardKv = 2, kBackwardGrad = 3 };
inline int ring_tag(RingStream stream, int step) {
  return static_cast<int>(stream) * 4096 + step % 4096;
}

/// The ring's view of its Communicator: float messages, received sizes checked, and every call's
/// time and traffic added to RingStats (when given).
class RingChannel {
 public:
  RingChannel(Communicator& comm, RingStats* stats) : comm_(comm), stats_(stats) {}
  Request send(std::span<const float> data, int dest, int tag);
  Request recv(std::span<float> data, int src, int tag);
  /// Waits for a receive and checks that exactly `floats` floats arrived (Error(kCommunication)).
  void wait_recv(Request& r, int64_t floats, const char* what);
  /// Waits for a request if one is pending (sends; receives already checked).
  void wait_if_pending(Request& r);
  MemoryCounter& memory() { return comm_.memory(); }
  RingStats* stats() const { return stats_; }

 private:
  double* comm_seconds() const { return stats_ ? &stats_->comm_seconds : nullptr; }
  Communicator& comm_;
  RingStats* stats_;
};

/// Times a whole ring call: on destruction adds (elapsed - kernel - comm time of this call) to
/// stats->other_seconds.
class CallTimer {
 public:
  explicit CallTimer(RingStats* stats);
  ~CallTimer();
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  RingStats* stats_;
  double kernel0_ = 0, comm0_ = 0;
  Stopwatch watch_;
};

/// A travelling k/v block packed in one buffer: k [B, len, Hkv, Dqk] then v [B, len, Hkv, Dv],
/// both dense BSHD. The buffer holds max_block tokens; a block of `len` tokens uses the prefix.
/// The backward's dk/dv accumulators use the same layout.
struct PackedKv {
  int64_t B, Hkv, Dk, Dv;
  int64_t floats(int64_t len) const { return B * len * Hkv * (Dk + Dv); }
  View k(float* base, int64_t len) const { return {base, k_shape(len), k_strides(len)}; }
  View v(float* base, int64_t len) const {
    return {base + k_floats(len), v_shape(len), v_strides(len)};
  }
  ConstView k(const float* base, int64_t len) const { return {base, k_shape(len), k_strides(len)}; }
  ConstView v(const float* base, int64_t len) const {
    return {base + k_floats(len), v_shape(len), v_strides(len)};
  }

 private:
  int64_t k_floats(int64_t len) const { return B * len * Hkv * Dk; }
  std::array<int64_t, 4> k_shape(int64_t len) const { return {B, len, Hkv, Dk}; }
  std::array<int64_t, 4> v_shape(int64_t len) const { return {B, len, Hkv, Dv}; }
  std::array<int64_t, 4> k_strides(int64_t len) const {
    return dense_strides(k_shape(len), MemoryLayout::kBSHD);
  }
  std::array<int64_t, 4> v_strides(int64_t len) const {
    return dense_strides(v_shape(len), MemoryLayout::kBSHD);
  }
};

/// The k/v double buffer of a ring pass: at step s the block of rank ring_step(s).kv_block is
/// current in one buffer and relayed on, while the next block arrives in the other. Starts with
/// this rank's own k/v packed in (with one rank nothing travels: its own views are the block and
/// nothing is copied); one object per pass (forward, backward), each on its own message stream.
class KvRelay {
 public:
  KvRelay(RingChannel& channel, const RingDims& d, const SequenceSharding& kv_sharding,
          RingStream stream, ConstView k, ConstView v);
  /// Makes step `s`'s block current: waits for it to arrive (s > 0), posts its relay and the
  /// receive of the next block as `step` says. Call for s = 0, 1, ..., P - 1 in order.
  void advance(const RingStep& step, int s);
  /// The current block's k and v ([B, len, Hkv, D] dense views) and its token count.
  ConstView k() const { return alone() ? own_k_ : pk_.k(current(), len_); }
  ConstView v() const { return alone() ? own_v_ : pk_.v(current(), len_); }
  int64_t length() const { return len_; }
  /// Waits for the relays still in flight (the buffers may be freed afterwards).
  void finish();

 private:
  const float* current() const { return buf_[static_cast<size_t>(cur_)].data(); }
  bool alone() const { return world_ == 1; }
  RingChannel& channel_;
  const SequenceSharding& kv_;
  RingStream stream_;
  int world_;
  ConstView own_k_, own_v_;
  PackedKv pk_;
  std::array<Tensor, 2> buf_;
  std::array<Request, 2> sends_;
  Request recv_;
  int cur_ = 0;
  int64_t len_ = 0;
};

/// The ring's use of the mask rule: whether a k/v block is hidden from every query of this rank
/// (MaskRule::classify of the blocks' position and document ranges).
class BlockSkip {
 public:
  BlockSkip(const AttentionParams& params, std::span<const int64_t> q_pos,
            std::span<const int64_t> q_doc);
  bool hidden(std::span<const int64_t> k_pos, std::span<const int64_t> k_doc) const;

 private:
  MaskRule rule_;
  BlockRange q_;
};

}  // namespace cpattn::detail
