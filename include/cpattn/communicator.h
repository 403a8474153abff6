// The Communicator contract (docs/design.md section 7): point-to-point and collective operations of
// a CP group, every wait bounded by a deadline. ThreadCommunicator (in-process ranks) and
// MpiCommunicator (OpenMPI) implement it; code written against Communicator& runs on either.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <typeindex>
#include <typeinfo>

#include "cpattn/memory.h"

namespace cpattn {

/// Default deadline of every wait.
inline constexpr std::chrono::milliseconds kDefaultCommTimeout{300'000};

/// The range of a deadline a user sets in seconds: 1 ms to 1e6 s (11.6 days).
inline constexpr double kMinTimeoutSeconds = 1e-3;
inline constexpr double kMaxTimeoutSeconds = 1e6;

/// The deadline of a user's setting of `seconds` (the CLI's --timeout, the Python package's
/// timeout=), rounded to whole milliseconds. Every wait has a deadline, so infinity is refused
/// like 0, a negative value, NaN or anything outside [kMinTimeoutSeconds, kMaxTimeoutSeconds]:
/// throws Error(kInvalidArgument) naming the setting as `name`.
std::chrono::milliseconds timeout_of_seconds(double seconds, std::string_view name);

namespace detail {
/// Backend-specific state of one pending operation.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  /// Non-blocking completion check; throws cpattn::Error if the operation failed.
  virtual bool test() = 0;
  /// Blocks until completion or `deadline`; on expiry throws Error(kTimeout) naming this rank,
  /// the peer, the tag and the byte count. Throws Error(kPeerFailed) if a peer rank failed.
  /// Returns the number of bytes transferred.
  virtual size_t wait(std::chrono::steady_clock::time_point deadline) = 0;
  /// Stops the operation if no transfer has started, or waits for a transfer in progress to end
  /// (bounded, never on a peer's progress). Afterwards the buffer is no longer used. Idempotent.
  virtual void cancel() noexcept = 0;
};
}  // namespace detail

/// A pending isend/irecv. Move-only. wait() must be called before the buffer is reused or freed;
/// a Request destroyed without wait() waits for completion (no dangling transfers) and swallows
/// errors (they were or will be reported by the failing rank). Exceptions: while an exception
/// unwinds the stack, or after wait() threw, destruction cancels the operation instead of waiting
/// (a rank that is failing must not block on peers that wait for it).
class Request {
 public:
  Request() = default;
  Request(std::unique_ptr<detail::RequestImpl> impl, std::chrono::milliseconds timeout)
      : impl_(std::move(impl)), timeout_(timeout) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept;
  ~Request();

  /// Waits up to the communicator's timeout. Returns bytes transferred (for irecv: the size of the
  /// message received, which is never larger than the buffer). Idempotent after completion.
  /// Throws Error(kTimeout | kPeerFailed | kCommunication); Error(kInvalidArgument) if !valid().
  size_t wait();
  /// True once complete (never blocks).
  bool test();
  bool valid() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<detail::RequestImpl> impl_;
  std::chrono::milliseconds timeout_{kDefaultCommTimeout};
  size_t bytes_ = 0;
  bool done_ = false;
  bool failed_ = false;  // a wait() threw: destruction cancels instead of waiting again
};

/// A group of `size()` ranks. Thread-compatible: one rank's communicator is used by one thread at a
/// time (the ring's compute thread); different ranks run concurrently.
///
/// A non-virtual interface: the public functions state the contract and call the protected
/// virtual hooks (do_*) that a backend implements (backend.h has the collectives and the split
/// planning a backend can build its hooks from); the typed conveniences sit on top, so a backend
/// declares nothing but its hooks. The shared conformance suite (tests/comm/conformance.h) states
/// the contract as tests; the in-process, MPI and torch ProcessGroup backends run it.
class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return do_rank(); }
  int size() const { return do_size(); }

  /// Sends `data` to rank `dest` with `tag` (>= 0). The buffer must stay alive and unchanged until
  /// the Request completes. Sending to oneself is allowed (matched by an irecv from self).
  /// Messages between one (source, destination, tag) are received in the order they were sent.
  /// Completion may require the matching irecv to be posted (rendezvous, like MPI_Ssend): post
  /// the irecv of an exchange before waiting on its isend.
  [[nodiscard]] Request isend(std::span<const std::byte> data, int dest, int tag) {
    return do_isend(data, dest, tag);
  }
  /// Receives a message from rank `src` with `tag` into `data`. A message larger than `data`
  /// fails with Error(kCommunication) naming the buffer size (and the message size where the
  /// backend knows it; never a truncated result).
  [[nodiscard]] Request irecv(std::span<std::byte> data, int src, int tag) {
    return do_irecv(data, src, tag);
  }

  /// Elementwise sum over all ranks, in place; every rank gets bitwise the same result.
  void allreduce_sum(std::span<float> data) { do_allreduce_sum(data); }
  void allreduce_sum(std::span<double> data) { do_allreduce_sum(data); }
  /// Block i of `send` (send.size() / size() bytes) goes to rank i; block j of `recv` comes from
  /// rank j. send.size() must equal recv.size() and be divisible by size().
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
    do_all_to_all(send, recv);
  }
  /// Returns once every rank has entered it (or throws on timeout / peer failure).
  void barrier() { do_barrier(); }

  /// Splits this group into sub-groups (MPI_Comm_split semantics). Collective: every rank of
  /// this communicator calls it. Ranks passing the same `color` (>= 0) form one new group, in
  /// which they are numbered by (key, rank in this group). The result is an independent
  /// communicator of that sub-group: its messages never match this communicator's or another
  /// sub-group's, it starts with this communicator's timeout and call number 0, charges the same
  /// MemoryCounter, and a failed rank anywhere in the underlying group releases its waits like
  /// this communicator's (in-process ranks). It must not outlive the group it was split from.
  /// The (color, key) pairs are first exchanged with this communicator's all_to_all (under its
  /// deadline), so a rank that does not take part times out instead of blocking. Throws
  /// Error(kInvalidArgument) on every rank when any rank passed color < 0, and when the backend
  /// cannot split (a backend without sub-groups keeps the default hook).
  std::unique_ptr<Communicator> split(int color, int key) { return do_split(color, key); }

  /// Deadline applied to every wait of this communicator (default 300 s): from 1 ms to
  /// kMaxTimeoutSeconds (as timeout_of_seconds); throws Error(kInvalidArgument) for 0, a
  /// negative value or more (a deadline past the clock's range would expire at once).
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Cooperative cancellation: throws Error(kPeerFailed) naming the rank when another rank of
  /// the group is known to have failed (in-process ranks know at once; other backends learn of a
  /// failure at their next message, and do nothing here). Long computations call it between
  /// pieces of work, so that a rank busy computing stops within one piece of a group failure.
  void throw_if_group_failed() const { do_throw_if_group_failed(); }

  /// Lets this rank's posted transfers move on without blocking, for backends that move data
  /// only inside their own calls: an MPI without an asynchronous progress thread matches and
  /// copies a large (rendezvous) message only inside an MPI call, so a ring block posted before
  /// a kernel call would wait for the kernel to finish. Long computations call it between
  /// pieces of work (the kernels' interruption points), so the ring's transfers proceed under
  /// compute. It may be called from the kernel's worker threads while the rank's own thread is
  /// in the same kernel call (concurrent calls skip the work instead of waiting for each other).
  /// Never throws: an error is kept by its request and thrown by that request's wait. Does
  /// nothing by default (in-process ranks copy inside wait(); gloo has threads of its own).
  void progress() noexcept { do_progress(); }

  /// Per-group state of a higher layer, of type T (default-constructed at first use, one per
  /// type), kept as long as this communicator lives; the communicator itself never reads it. A
  /// sub-group made by split starts with none. The state layer keeps the count of the group's
  /// checked calls in it (attention.h, set_next_call_number). Not thread-safe, like the rest.
  template <typename T>
  T& layer_state() {
    std::shared_ptr<void>& slot = layer_state_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>();
    return *static_cast<T*>(slot.get());
  }

  /// The counter this rank's cpattn allocations are charged to (per rank for in-process ranks;
  /// the process counter under MPI).
  MemoryCounter& memory() { return do_memory(); }

  /// Typed conveniences over the byte interface (T trivially copyable).
  template <typename T>
  [[nodiscard]] Request isend(std::span<const T> data, int dest, int tag) {
    static_assert(std::is_trivially_copyable_v<T>);
    return isend(std::as_bytes(data), dest, tag);
  }
  template <typename T>
  [[nodiscard]] Request irecv(std::span<T> data, int src, int tag) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_const_v<T>);
    return irecv(std::as_writable_bytes(data), src, tag);
  }
  /// all_to_all over typed blocks: send.size() / size() elements per block.
  template <typename T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_const_v<T>);
    all_to_all(std::as_bytes(send), std::as_writable_bytes(recv));
  }

 protected:
  /// The hooks of a backend: each does what its public function above states. do_split,
  /// do_throw_if_group_failed and do_progress have defaults (no sub-groups; nothing known of
  /// failures between messages; nothing to advance).
  virtual int do_rank() const = 0;
  virtual int do_size() const = 0;
  virtual Request do_isend(std::span<const std::byte> data, int dest, int tag) = 0;
  virtual Request do_irecv(std::span<std::byte> data, int src, int tag) = 0;
  virtual void do_allreduce_sum(std::span<float> data) = 0;
  virtual void do_allreduce_sum(std::span<double> data) = 0;
  virtual void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key);
  virtual void do_throw_if_group_failed() const {}
  virtual void do_progress() noexcept {}
  virtual MemoryCounter& do_memory() = 0;

  std::chrono::milliseconds timeout_{kDefaultCommTimeout};

 private:
  std::map<std::type_index, std::shared_ptr<void>> layer_state_;
};

}  // namespace cpattn
