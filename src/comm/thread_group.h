// The shared state of one group of in-process ranks: mailboxes matched per (src, dst, tag),
// rendezvous copies, and the ranks' failure / exit flags that release the ranks waiting for them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace cpattn::detail {

/// One posted isend or irecv. Owned by its request; the group holds a pointer while it is queued.
struct ThreadOp {
  enum class State {
    kQueued,     // waiting in a mailbox for its match
    kMatched,    // paired with `match`; the first of the two owners to wait (or cancel) copies
    kCopying,    // a thread is copying between the two buffers outside the lock
    kDone,       // transferred
    kFailed,     // matched but unusable (message larger than the receive buffer)
    kCancelled,  // removed from its mailbox unmatched
  };
  bool is_send = false;
  uint64_t context = 0;  // the communicator (root group 0, or a sub-group of split())
  int owner = 0;         // the group rank that posted it (waits on its condition variable)
  int peer = 0;          // group rank
  int owner_label = 0;   // owner and peer as numbered by the posting communicator (messages)
  int peer_label = 0;
  int tag = 0;
  const std::byte* message = nullptr;    // send only
  std::byte* buffer = nullptr;           // recv only
  size_t bytes = 0;                      // send: message size; recv: buffer capacity
  std::chrono::milliseconds timeout{0};  // for the timeout message
  State state = State::kQueued;
  ThreadOp* match = nullptr;  // the opposite op, once matched
  size_t transferred = 0;
  std::string error;  // why, when kFailed
};

/// Mailboxes and failure state of a group. All methods are thread-safe.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size);

  int size() const { return size_; }
  /// Queues `op` or pairs it with the oldest opposite op of the same (src, dst, tag). Throws
  /// Error(kPeerFailed) if the peer failed or exited.
  void post(ThreadOp& op);
  /// True once `op` transferred; throws as wait() would.
  bool test(ThreadOp& op);
  /// Blocks until `op` completes, its peer fails or exits, or `deadline` passes. A failure
  /// releases exactly the ranks waiting for the failed rank; they fail in turn, so a failure
  /// travels to every rank that depends on it while exchanges between healthy ranks that are
  /// already under way (e.g. the rest of a collective) still complete.
  size_t wait(ThreadOp& op, std::chrono::steady_clock::time_point deadline);
  /// Unqueues `op` if unmatched, else finishes its transfer (copying it or waiting for the copy).
  void cancel(ThreadOp& op) noexcept;

  /// Records that `rank` threw `message` and wakes every rank.
  void fail(int rank, const std::string& message);
  /// Records that `rank` returned normally and wakes every rank.
  void exited(int rank);
  /// The first rank that failed, or -1.
  int failed_rank() const;

  /// The context of the sub-group of `color` made by the `sequence`-th split of the communicator
  /// with context `parent`: every member asking for the same triple gets the same new context
  /// (unique in this group); counted per member until release_context.
  uint64_t acquire_context(uint64_t parent, uint64_t sequence, int color);
  /// A member of the context's sub-group is gone; the last one forgets the context.
  void release_context(uint64_t context) noexcept;
  /// Throws Error(kPeerFailed) "<who>: stopped because rank F failed: ..." once any rank failed
  /// (F: the first, numbered in this group: "group rank F" when `who` is a rank of a sub-group,
  /// whose own numbering differs).
  void throw_if_failed(std::string_view who, bool in_sub_group) const;

 private:
  using Key = std::tuple<uint64_t, int, int, int>;  // (context, src, dst, tag)
  struct Mailbox {
    std::deque<ThreadOp*> sends;
    std::deque<ThreadOp*> recvs;
  };

  // Copies a kMatched pair (unlocking `lock` meanwhile) and completes both ops.
  void transfer(std::unique_lock<std::mutex>& lock, ThreadOp& op);
  // Throws if `op` (still queued) can never complete. Requires mu_.
  void check_alive(const ThreadOp& op) const;
  // True (bytes set) if `op` transferred; throws if it failed; false while pending. Requires mu_.
  bool finished(const ThreadOp& op, size_t& bytes) const;
  static Key key_of(const ThreadOp& op);

  const int size_;
  mutable std::mutex mu_;
  std::vector<std::condition_variable> wake_;  // one per rank: its ops changed or the group did
  std::map<Key, Mailbox> mailboxes_;
  int failed_rank_ = -1;                            // the first rank that failed
  std::vector<std::optional<std::string>> failed_;  // per rank: why it failed
  std::vector<bool> exited_;
  // Sub-group contexts: (parent, sequence, color) -> context, and members alive per context.
  std::map<std::tuple<uint64_t, uint64_t, int>, uint64_t> contexts_;
  std::map<uint64_t, std::pair<std::tuple<uint64_t, uint64_t, int>, int>> context_members_;
  uint64_t next_context_ = 1;  // 0 is the root group
};

/// "isend to rank 3 (tag 7, 1024 bytes)" / "irecv from rank 3 (tag 7, buffer of 1024 bytes)".
std::string describe(const ThreadOp& op);

}  // namespace cpattn::detail
