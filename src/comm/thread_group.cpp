// Mailbox matching and failure propagation of in-process ranks (see thread_group.h).
#include "comm/thread_group.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "cpattn/backend.h"
#include "cpattn/error.h"

namespace cpattn::detail {

namespace {
std::string tag_name(int tag) {
  // Negative tags are the internal collective channel; users can only post tags >= 0.
  return tag < 0 ? std::string("collective") : std::to_string(tag);
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

// The owner and the peer of `op` as its communicator numbers them ("rank 1"; in a sub-group
// "rank 1 of a sub-group (group rank 3)": context 0 is the root group).
std::string label(int rank, int group_rank, const ThreadOp& op) {
  return backend::rank_label(rank, op.context != 0 ? std::optional(group_rank) : std::nullopt);
}
std::string owner_name(const ThreadOp& op) { return label(op.owner_label, op.owner, op); }
std::string peer_name(const ThreadOp& op) { return label(op.peer_label, op.peer, op); }
}  // namespace

std::string describe(const ThreadOp& op) {
  if (op.is_send) {
    return str_cat("isend to ", peer_name(op), " (tag ", tag_name(op.tag), ", ", op.bytes,
                   " bytes)");
  }
  return str_cat("irecv from ", peer_name(op), " (tag ", tag_name(op.tag), ", buffer of ", op.bytes,
                 " bytes)");
}

ThreadGroup::ThreadGroup(int size)
    : size_(size),
      wake_(static_cast<size_t>(size)),
      failed_(static_cast<size_t>(size)),
      exited_(static_cast<size_t>(size), false) {}

ThreadGroup::Key ThreadGroup::key_of(const ThreadOp& op) {
  return op.is_send ? Key{op.context, op.owner, op.peer, op.tag}
                    : Key{op.context, op.peer, op.owner, op.tag};
}

void ThreadGroup::check_alive(const ThreadOp& op) const {
  if (const auto& peer_failure = failed_[static_cast<size_t>(op.peer)]) {
    throw Error(ErrorCode::kPeerFailed,
                str_cat(owner_name(op), ": ", describe(op), " aborted because ", peer_name(op),
                        " failed: ", *peer_failure));
  }
  if (exited_[static_cast<size_t>(op.peer)]) {
    throw Error(ErrorCode::kPeerFailed, str_cat(peer_name(op), " exited while ", owner_name(op),
                                                " waits for its ", describe(op)));
  }
}

bool ThreadGroup::finished(const ThreadOp& op, size_t& bytes) const {
  switch (op.state) {
    case ThreadOp::State::kDone:
      bytes = op.transferred;
      return true;
    case ThreadOp::State::kFailed:
      throw Error(ErrorCode::kCommunication, op.error);
    case ThreadOp::State::kCancelled:
      throw Error(ErrorCode::kInternal,
                  str_cat(owner_name(op), ": wait on a cancelled ", describe(op)));
    default:
      return false;
  }
}

void ThreadGroup::post(ThreadOp& op) {
  std::lock_guard lock(mu_);
  check_alive(op);
  const Key key = key_of(op);
  Mailbox& box = mailboxes_[key];
  std::deque<ThreadOp*>& opposite = op.is_send ? box.recvs : box.sends;
  if (opposite.empty()) {
    (op.is_send ? box.sends : box.recvs).push_back(&op);
    return;
  }
  ThreadOp& match = *opposite.front();
  opposite.pop_front();
  if (box.sends.empty() && box.recvs.empty()) mailboxes_.erase(key);
  op.match = &match;
  match.match = &op;
  op.state = match.state = ThreadOp::State::kMatched;
  wake_[static_cast<size_t>(match.owner)].notify_all();
}

void ThreadGroup::transfer(std::unique_lock<std::mutex>& lock, ThreadOp& op) {
  ThreadOp& send = op.is_send ? op : *op.match;
  ThreadOp& recv = op.is_send ? *op.match : op;
  send.state = recv.state = ThreadOp::State::kCopying;
  lock.unlock();

  // Rendezvous: the one copy of the message, from the sender's buffer into the receiver's, done
  // by whichever owner waits first (in a ring each rank copies its own incoming block, so the
  // copies run in parallel) and outside the lock. Both buffers are pinned: wait() and cancel()
  // of either op block while the state is kCopying.
  const bool fits = send.bytes <= recv.bytes;
  if (fits && send.bytes > 0) std::memcpy(recv.buffer, send.message, send.bytes);

  lock.lock();
  send.state = ThreadOp::State::kDone;
  send.transferred = send.bytes;
  if (fits) {
    recv.state = ThreadOp::State::kDone;
    recv.transferred = send.bytes;
  } else {
    // Like MPI, the send completes; the receiver gets the error.
    recv.state = ThreadOp::State::kFailed;
    recv.error = str_cat(owner_name(recv), ": message from ", peer_name(recv), " (tag ",
                         tag_name(send.tag), ") is ", send.bytes,
                         " bytes, larger than the receive buffer of ", recv.bytes, " bytes");
  }
  wake_[static_cast<size_t>(send.owner)].notify_all();
  wake_[static_cast<size_t>(recv.owner)].notify_all();
}

bool ThreadGroup::test(ThreadOp& op) {
  std::unique_lock lock(mu_);
  if (op.state == ThreadOp::State::kMatched) transfer(lock, op);
  size_t bytes = 0;
  if (finished(op, bytes)) return true;
  if (op.state == ThreadOp::State::kQueued) check_alive(op);
  return false;
}

size_t ThreadGroup::wait(ThreadOp& op, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  std::condition_variable& wake = wake_[static_cast<size_t>(op.owner)];
  for (;;) {
    size_t bytes = 0;
    if (finished(op, bytes)) return bytes;
    if (op.state == ThreadOp::State::kMatched) {
      transfer(lock, op);
      continue;
    }
    if (op.state == ThreadOp::State::kCopying) {
      // A copy is bounded work in another thread; no deadline applies.
      wake.wait(lock);
      continue;
    }
    check_alive(op);
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(ErrorCode::kTimeout,
                  str_cat(owner_name(op), ": timed out after ", seconds(op.timeout),
                          " s waiting for ", describe(op)));
    }
    wake.wait_until(lock, deadline);
  }
}

void ThreadGroup::cancel(ThreadOp& op) noexcept {
  std::unique_lock lock(mu_);
  std::condition_variable& wake = wake_[static_cast<size_t>(op.owner)];
  for (;;) {
    switch (op.state) {
      case ThreadOp::State::kMatched:
        // The peer's buffer is pinned by the match; finishing the copy releases both.
        transfer(lock, op);
        break;
      case ThreadOp::State::kCopying:
        wake.wait(lock);
        break;
      case ThreadOp::State::kQueued: {
        const Key key = key_of(op);
        auto it = mailboxes_.find(key);
        if (it != mailboxes_.end()) {
          std::deque<ThreadOp*>& queue = op.is_send ? it->second.sends : it->second.recvs;
          queue.erase(std::remove(queue.begin(), queue.end(), &op), queue.end());
          if (it->second.sends.empty() && it->second.recvs.empty()) mailboxes_.erase(it);
        }
        op.state = ThreadOp::State::kCancelled;
        return;
      }
      default:
        return;
    }
  }
}

void ThreadGroup::fail(int rank, const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (failed_[static_cast<size_t>(rank)]) return;
    failed_[static_cast<size_t>(rank)] = message;
    if (failed_rank_ < 0) failed_rank_ = rank;
  }
  for (auto& w : wake_) w.notify_all();
}

void ThreadGroup::exited(int rank) {
  {
    std::lock_guard lock(mu_);
    exited_[static_cast<size_t>(rank)] = true;
  }
  for (auto& w : wake_) w.notify_all();
}

void ThreadGroup::throw_if_failed(std::string_view who, bool in_sub_group) const {
  std::lock_guard lock(mu_);
  if (failed_rank_ < 0) return;
  throw Error(ErrorCode::kPeerFailed,
              str_cat(who, ": stopped because ", in_sub_group ? "group rank " : "rank ",
                      failed_rank_, " failed: ", *failed_[static_cast<size_t>(failed_rank_)]));
}

uint64_t ThreadGroup::acquire_context(uint64_t parent, uint64_t sequence, int color) {
  std::lock_guard lock(mu_);
  const auto key = std::make_tuple(parent, sequence, color);
  auto it = contexts_.find(key);
  if (it == contexts_.end()) it = contexts_.emplace(key, next_context_++).first;
  auto& members = context_members_[it->second];
  members.first = key;
  ++members.second;
  return it->second;
}

void ThreadGroup::release_context(uint64_t context) noexcept {
  std::lock_guard lock(mu_);
  const auto it = context_members_.find(context);
  if (it == context_members_.end() || --it->second.second > 0) return;
  contexts_.erase(it->second.first);
  context_members_.erase(it);
}

int ThreadGroup::failed_rank() const {
  std::lock_guard lock(mu_);
  return failed_rank_;
}

}  // namespace cpattn::detail
