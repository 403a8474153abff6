// Private pieces shared by the ring forward and backward: argument validation, k/v block packing,
// block-level mask skipping and message tags.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/ring.h"

namespace cpattn::detail {

/// Sizes of one ring call, checked once by validate_ring_call (kernels and helpers trust them).
struct RingDims {
  int64_t B = 0, Sq = 0, Sk = 0, Hq = 0, Hkv = 0, Dqk = 0, Dv = 0;
  int64_t max_block = 0;  ///< the largest Sk_r over all ranks (buffer size of a travelling block)
  int rank = 0, world = 1;
};

/// The single validation layer of the ring: group vs shardings, shapes vs local lengths, and the
/// kernel's shape rules. Throws Error(kShapeMismatch | kInvalidArgument) naming expected vs got.
RingDims validate_ring_call(const Communicator& comm, ConstView q, ConstView k, ConstView v,
                            const SequenceSharding& q_sharding, const SequenceSharding& kv_sharding,
                            const AttentionParams& params, const RingOptions& options);

/// Message tags: one kind per stream, the step in the low bits (unique per call and readable in
/// timeout messages: "tag 4098" = k/v of the backward, step 2).
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

 private:
  Communicator& comm_;
  RingStats* stats_;
};

/// Adds the seconds from construction to destruction to *sink (nothing when sink is null).
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* sink) : sink_(sink) {
    if (sink_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~ScopedSeconds() {
    if (sink_ != nullptr) {
      *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point start_;
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
  std::chrono::steady_clock::time_point start_;
};

/// A travelling k/v block packed in one buffer: k [B, len, Hkv, Dqk] then v [B, len, Hkv, Dv],
/// both dense BSHD. The buffer holds max_block tokens; a block of `len` tokens uses the prefix.
struct PackedKv {
  int64_t B, Hkv, Dk, Dv;
  int64_t floats(int64_t len) const { return B * len * Hkv * (Dk + Dv); }
  View k(float* base, int64_t len) const;
  View v(float* base, int64_t len) const;
};
/// Copies k and v (any strides) into base (dense, as PackedKv describes).
void pack_kv(const PackedKv& p, ConstView k, ConstView v, float* base);
/// Copies a packed view out into a dense BSHD tensor view.
void copy_view(ConstView src, View dst);

/// Conservative block skip: true only if the masks hide every (q, k) pair, judged from the ranges
/// of positions (causal, window) and document ids. Empty q or k counts as hidden.
bool block_hidden(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                  std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                  const AttentionParams& params);

/// Number of (q, k) pairs the masks leave visible (exact, O(Sq * Sk)); load-balance statistics.
int64_t count_visible_pairs(std::span<const int64_t> q_pos, std::span<const int64_t> k_pos,
                            std::span<const int64_t> q_doc, std::span<const int64_t> k_doc,
                            const AttentionParams& params);

}  // namespace cpattn::detail
