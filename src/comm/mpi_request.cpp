// MpiRequest (see mpi_request.h).
#include "comm/mpi_request.h"

#include <algorithm>
#include <thread>

namespace cpattn::detail {

namespace {
// Cancelled receives finish at once; an unmatched send cannot be cancelled by OpenMPI (ob1 ignores
// MPI_Cancel on sends), so cancel() gives up on it after this long.
constexpr auto kCancelGrace = std::chrono::milliseconds(100);

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }
}  // namespace

MpiRequest::MpiRequest(std::shared_ptr<MpiState> state, Spec spec)
    : state_(std::move(state)), spec_(std::move(spec)) {
  check_thread();
  MpiLock lock = state_->lock();
  CPATTN_CHECK(state_->abandoned_send.empty(), ErrorCode::kCommunication,
               state_->label(state_->rank), ": ", describe(), " refused: an earlier ",
               state_->abandoned_send,
               " was given up on unmatched (OpenMPI cannot cancel a send), and a later message "
               "could be taken for it, so this communicator can no longer be used (end the job "
               "and resume it, or make a new MpiCommunicator)");
  if (!spec_.is_send) {
    queue().push_back(this);
    return;
  }
  const size_t k = state_->chunk_bytes;
  for (size_t off = 0;; off += k) {
    const size_t n = std::min(k, spec_.bytes - off);
    MPI_Request& r = pending_.emplace_back(MPI_REQUEST_NULL);
    const int rc = MPI_Isend(spec_.message + off, static_cast<int>(n), MPI_BYTE, spec_.peer,
                             spec_.tag, spec_.comm, &r);
    if (rc != MPI_SUCCESS) {
      lock = {};
      cancel();  // chunks already posted must not outlive the caller's buffer
      check_mpi(rc, state_->label(state_->rank), "MPI_Isend");
    }
    if (n < k) break;
  }
}

MpiRequest::~MpiRequest() { cancel(); }

MpiState::Key MpiRequest::key() const { return {spec_.comm, spec_.peer, spec_.tag}; }

std::deque<MpiRequest*>& MpiRequest::queue() { return state_->recv_queues[key()]; }

void MpiRequest::check_thread() const {
  if (state_->thread_level >= MPI_THREAD_SERIALIZED) return;
  int main = 0;
  MPI_Is_thread_main(&main);
  CPATTN_CHECK(main != 0, ErrorCode::kInvalidArgument, state_->label(state_->rank),
               ": MPI runs at a thread level below MPI_THREAD_SERIALIZED, so only the main thread "
               "may call it, but another thread (a kernel worker) used ",
               describe(),
               "; initialise MPI with MPI_THREAD_SERIALIZED or MULTIPLE (MpiSession asks for "
               "MULTIPLE) or run 1 kernel thread per rank");
}

void MpiRequest::fail(const Error& e) {
  error_ = e;
  throw e;
}

std::string MpiRequest::describe() const {
  if (spec_.is_send) {
    return str_cat("isend to ", state_->label(spec_.peer), " (tag ", spec_.tag_label, ", ",
                   spec_.bytes, " bytes)");
  }
  return str_cat("irecv from ", state_->label(spec_.peer), " (tag ", spec_.tag_label,
                 ", buffer of ", spec_.bytes, " bytes)");
}

bool MpiRequest::progress_send() {
  for (MPI_Request& r : pending_) {
    if (r == MPI_REQUEST_NULL) continue;
    int flag = 0;
    check_mpi(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), state_->label(state_->rank),
              "MPI_Test (isend)");
    if (flag == 0) return false;
  }
  return true;
}

bool MpiRequest::progress_head() {
  for (;;) {
    if (pending_.empty()) {
      // A receive cancelled part-way left the rest of its message in MPI: skip it first.
      if (!skipping_ && transferred_ == 0 && state_->abandoned.erase(key()) > 0) skipping_ = true;
      // Probe the next chunk: matched (removed from MPI's queue) and sized in one call.
      int flag = 0;
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status status;
      check_mpi(MPI_Improbe(spec_.peer, spec_.tag, spec_.comm, &flag, &msg, &status),
                state_->label(state_->rank), "MPI_Improbe");
      if (flag == 0) return false;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      chunk_ = static_cast<size_t>(count);
      if (!skipping_ && !draining_ && chunk_ > spec_.bytes - transferred_) draining_ = true;
      std::byte* dst = spec_.buffer + transferred_;
      if (skipping_ || draining_) {
        drain_.resize(chunk_);
        dst = drain_.data();
      }
      MPI_Request& r = pending_.emplace_back(MPI_REQUEST_NULL);
      check_mpi(MPI_Imrecv(dst, count, MPI_BYTE, &msg, &r), state_->label(state_->rank),
                "MPI_Imrecv");
    }
    int flag = 0;
    check_mpi(MPI_Test(&pending_[0], &flag, MPI_STATUS_IGNORE), state_->label(state_->rank),
              "MPI_Test (irecv)");
    if (flag == 0) return false;
    pending_.clear();
    mid_message_ = chunk_ == state_->chunk_bytes;  // a full chunk: more of this message follow
    if (skipping_) {
      skipping_ = mid_message_;  // until the abandoned message's last chunk
      continue;
    }
    transferred_ += chunk_;
    if (mid_message_) continue;
    drain_ = {};
    phase_ = Phase::kDone;
    return true;
  }
}

void MpiRequest::advance(std::deque<MpiRequest*>& q, const MpiRequest* until) {
  while (!q.empty() && (until == nullptr || until->phase_ == Phase::kPending)) {
    MpiRequest* head = q.front();
    try {
      if (!head->progress_head()) return;
    } catch (const Error& e) {
      head->error_ = e;  // an MPI error: the head fails, the queue moves on
      head->phase_ = Phase::kDone;
    } catch (const std::exception& e) {  // out of memory for a chunk's scratch
      head->error_ =
          Error(ErrorCode::kCommunication, str_cat(head->state_->label(head->state_->rank), ": ",
                                                   head->describe(), " failed: ", e.what()));
      head->phase_ = Phase::kDone;
    }
    q.pop_front();
  }
}

void MpiRequest::progress_all(MpiState& state) noexcept {
  bool pending = false;
  for (auto& [key, q] : state.recv_queues) {
    pending = pending || !q.empty();
    advance(q, nullptr);
  }
  if (!pending) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, state.p2p, &flag, MPI_STATUS_IGNORE);
  }
}

bool MpiRequest::test() {
  check_thread();
  // Under the lock: progress() may advance this request from another thread.
  MpiLock lock = state_->lock();
  if (error_) throw *error_;
  if (phase_ == Phase::kDone && !draining_) return true;
  try {
    if (spec_.is_send) {
      if (progress_send()) phase_ = Phase::kDone;
    } else {
      advance(queue(), this);
    }
  } catch (const Error& e) {
    fail(e);
  }
  if (error_) throw *error_;
  if (phase_ != Phase::kDone) return false;
  if (draining_) {
    fail(Error(ErrorCode::kCommunication,
               str_cat(state_->label(state_->rank), ": message from ", state_->label(spec_.peer),
                       " (tag ", spec_.tag_label, ") is ", transferred_,
                       " bytes, larger than the receive buffer of ", spec_.bytes, " bytes")));
  }
  if (spec_.is_send) transferred_ = spec_.bytes;
  return true;
}

size_t MpiRequest::wait(std::chrono::steady_clock::time_point deadline) {
  // Poll: MPI has no timed wait, and polling drives OpenMPI's progress engine. A transfer in
  // flight needs it constantly (without single-copy shared memory every 32 KiB fragment is a
  // round trip; sleeping 1 ms between polls cut bandwidth 30x), so spin with yields, which leave
  // the core to an oversubscribed peer, like MPI_Wait does. Only a wait that has lasted kSpin
  // (a peer still computing, or dead) polls every kNap to spare the CPU.
  constexpr auto kSpin = std::chrono::seconds(1);
  constexpr auto kNap = std::chrono::microseconds(100);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (test()) return transferred_;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      const MpiLock lock = state_->lock();
      fail(Error(ErrorCode::kTimeout,
                 str_cat(state_->label(state_->rank), ": timed out after ", seconds(spec_.timeout),
                         " s waiting for ", describe())));
    }
    if (now - start < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
}

void MpiRequest::cancel() noexcept {
  if (!mpi_active()) return;
  MpiLock lock = state_->lock();
  if (phase_ == Phase::kCancelled) return;
  if (!spec_.is_send) {
    std::deque<MpiRequest*>& q = queue();
    q.erase(std::remove(q.begin(), q.end(), this), q.end());
    if (q.empty()) state_->recv_queues.erase(key());
  }
  // A matched receive (MPI_Imrecv) always completes; an unmatched send may never.
  const bool in_flight = !spec_.is_send && !pending_.empty();
  const auto give_up = std::chrono::steady_clock::now() + kCancelGrace;
  for (MPI_Request& r : pending_) {
    if (r == MPI_REQUEST_NULL) continue;
    if (spec_.is_send) MPI_Cancel(&r);
    for (;;) {
      int flag = 0;
      if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag != 0) break;
      if (spec_.is_send && std::chrono::steady_clock::now() > give_up) {
        MPI_Request_free(&r);
        if (state_->abandoned_send.empty()) state_->abandoned_send = describe();
        break;
      }
      std::this_thread::yield();
    }
  }
  pending_.clear();
  // A receive cancelled part-way through its message (or through skipping an earlier one) leaves
  // the rest in MPI: the next receive on this (source, tag) skips it instead of taking it.
  if (!spec_.is_send && (in_flight ? chunk_ == state_->chunk_bytes : mid_message_ || skipping_)) {
    state_->abandoned.insert(key());
  }
  phase_ = Phase::kCancelled;
}

}  // namespace cpattn::detail
