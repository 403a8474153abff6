// MpiCommunicator: tagged point-to-point messages over MPI with polled deadlines and chunking,
// and the shared point-to-point collectives on a second duplicated communicator.
#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/mpi_state.h"
#include "cpattn/error.h"
#include "cpattn/mpi_communicator.h"

namespace cpattn {

namespace detail {
namespace {

// Cancelled receives finish at once; an unmatched rendezvous send cannot be cancelled by OpenMPI
// (ob1 ignores MPI_Cancel on sends), so cancel() gives up on it after this long.
constexpr auto kCancelGrace = std::chrono::milliseconds(100);

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

// One isend or irecv. A message is sent as chunks of at most chunk_bytes, the last one shorter
// than chunk_bytes (possibly empty), so the receiver knows where a message ends: it posts one
// chunk at a time and stops after a short one.
class MpiRequest final : public RequestImpl {
 public:
  struct Spec {
    MPI_Comm comm;
    bool is_send;
    const std::byte* message;  // send
    std::byte* buffer;         // recv
    size_t bytes;              // send: size; recv: capacity
    int peer;
    int tag;
    std::string tag_label;
    std::chrono::milliseconds timeout;
  };

  MpiRequest(std::shared_ptr<MpiState> state, Spec spec)
      : state_(std::move(state)), spec_(std::move(spec)) {
    auto lock = state_->lock();
    try {
      if (spec_.is_send) {
        const size_t k = state_->chunk_bytes;
        for (size_t off = 0;; off += k) {
          const size_t n = std::min(k, spec_.bytes - off);
          post(MPI_Isend(spec_.message + off, static_cast<int>(n), MPI_BYTE, spec_.peer,
                         spec_.tag, spec_.comm, &next_slot()),
               "MPI_Isend");
          if (n < k) break;
        }
      } else {
        post_recv_chunk();
      }
    } catch (...) {
      lock = {};
      cancel();  // chunks already posted must not outlive the caller's buffer
      throw;
    }
  }
  ~MpiRequest() override { cancel(); }

  bool test() override {
    if (error_) throw *error_;
    if (done_) return true;
    auto lock = state_->lock();
    try {
      if (spec_.is_send) {
        for (MPI_Request& r : pending_) {
          if (!test_one(r, nullptr)) return false;
        }
        transferred_ = spec_.bytes;
        done_ = true;
      } else {
        // received_chunk() may post the next chunk into pending_[0].
        MPI_Status status;
        while (!done_ && test_one(pending_[0], &status)) received_chunk(status);
      }
    } catch (const Error& e) {
      error_ = e;
      throw;
    }
    return done_;
  }

  size_t wait(std::chrono::steady_clock::time_point deadline) override {
    // Poll: MPI has no timed wait, and polling drives OpenMPI's progress engine. Yield at first
    // (latency), then back off to sleeps of up to 1 ms so oversubscribed ranks leave the CPU to
    // the peer they wait for.
    const auto start = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(10);
    for (;;) {
      if (test()) return transferred_;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        error_ = Error(ErrorCode::kTimeout,
                       str_cat("rank ", state_->rank, ": timed out after ", seconds(spec_.timeout),
                               " s waiting for ", describe()));
        throw *error_;
      }
      if (now - start < std::chrono::microseconds(200)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(1000));
      }
    }
  }

  void cancel() noexcept override {
    if (!mpi_active()) return;
    auto lock = state_->lock();
    for (MPI_Request& r : pending_) {
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    }
    const auto give_up = std::chrono::steady_clock::now() + kCancelGrace;
    for (MPI_Request& r : pending_) {
      while (r != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        if (flag != 0 || r == MPI_REQUEST_NULL) break;
        if (std::chrono::steady_clock::now() > give_up) {
          MPI_Request_free(&r);
          break;
        }
        std::this_thread::yield();
      }
      r = MPI_REQUEST_NULL;
    }
  }

 private:
  MPI_Request& next_slot() { return pending_.emplace_back(MPI_REQUEST_NULL); }

  // Requires the MPI lock. True once `r` completed (it is then MPI_REQUEST_NULL).
  bool test_one(MPI_Request& r, MPI_Status* status) {
    if (r == MPI_REQUEST_NULL) return true;
    int flag = 0;
    const int rc = MPI_Test(&r, &flag, status != nullptr ? status : MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) fail_transfer(rc);
    return flag != 0;
  }

  void post(int rc, const char* call) {
    if (rc != MPI_SUCCESS) {
      try {
        check_mpi(rc, state_->rank, call);
      } catch (const Error& e) {
        error_ = Error(e.code(), str_cat(e.what(), " (", describe(), ")"));
        throw *error_;
      }
    }
  }

  // Requires the MPI lock. Receives chunk k at buffer + offset_ with capacity min(left, chunk).
  void post_recv_chunk() {
    chunk_capacity_ = std::min(state_->chunk_bytes, spec_.bytes - transferred_);
    pending_.clear();
    post(MPI_Irecv(spec_.buffer + transferred_, static_cast<int>(chunk_capacity_), MPI_BYTE,
                   spec_.peer, spec_.tag, spec_.comm, &next_slot()),
         "MPI_Irecv");
  }

  // Requires the MPI lock. A full chunk means more follow; a short one ends the message.
  void received_chunk(const MPI_Status& status) {
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    transferred_ += static_cast<size_t>(count);
    if (static_cast<size_t>(count) == state_->chunk_bytes) {
      post_recv_chunk();
    } else {
      done_ = true;
    }
  }

  [[noreturn]] void fail_transfer(int rc) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE) {
      throw Error(ErrorCode::kCommunication,
                  str_cat("rank ", state_->rank, ": message from rank ", spec_.peer, " (tag ",
                          spec_.tag_label, ") is larger than the receive buffer of ", spec_.bytes,
                          " bytes (MPI_ERR_TRUNCATE)"));
    }
    check_mpi(rc, state_->rank, spec_.is_send ? "MPI_Isend" : "MPI_Irecv");
    throw Error(ErrorCode::kInternal, "unreachable");
  }

  std::string describe() const {
    if (spec_.is_send) {
      return str_cat("isend to rank ", spec_.peer, " (tag ", spec_.tag_label, ", ", spec_.bytes,
                     " bytes)");
    }
    return str_cat("irecv from rank ", spec_.peer, " (tag ", spec_.tag_label, ", buffer of ",
                   spec_.bytes, " bytes)");
  }

  std::shared_ptr<MpiState> state_;
  Spec spec_;
  std::vector<MPI_Request> pending_;  // send: every chunk; recv: the current chunk
  size_t chunk_capacity_ = 0;
  size_t transferred_ = 0;
  bool done_ = false;
  std::optional<Error> error_;  // rethrown by later waits
};

}  // namespace
}  // namespace detail

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const MpiOptions& options)
    : state_(std::make_shared<detail::MpiState>()) {
  CPATTN_CHECK(detail::mpi_active(), ErrorCode::kInvalidArgument,
               "MpiCommunicator: MPI is not initialised (create an MpiSession first)");
  CPATTN_CHECK(options.chunk_bytes >= 1 && options.chunk_bytes <= size_t{INT32_MAX},
               ErrorCode::kInvalidArgument, "MpiOptions::chunk_bytes must be in [1, 2^31 - 1], got ",
               options.chunk_bytes);
  detail::MpiState& s = *state_;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  s.serialize = provided < MPI_THREAD_MULTIPLE;
  s.chunk_bytes = options.chunk_bytes;
  detail::check_mpi(MPI_Comm_rank(comm, &s.rank), -1, "MPI_Comm_rank");
  detail::check_mpi(MPI_Comm_size(comm, &s.size), s.rank, "MPI_Comm_size");
  detail::check_mpi(MPI_Comm_dup(comm, &s.p2p), s.rank, "MPI_Comm_dup");
  detail::check_mpi(MPI_Comm_dup(comm, &s.coll), s.rank, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(s.p2p, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(s.coll, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(s.p2p, MPI_TAG_UB, &tag_ub, &found);
  if (found != 0 && tag_ub != nullptr) s.tag_ub = *tag_ub;
}

MpiCommunicator::~MpiCommunicator() = default;

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }
MemoryCounter& MpiCommunicator::memory() { return process_memory(); }

namespace {
void check_peer_and_tag(const detail::MpiState& s, const char* op, int peer, int tag) {
  CPATTN_CHECK(peer >= 0 && peer < s.size, ErrorCode::kInvalidArgument, "rank ", s.rank, ": ", op,
               " peer must be in [0, ", s.size, "), got ", peer);
  CPATTN_CHECK(tag >= 0 && tag <= s.tag_ub, ErrorCode::kInvalidArgument, op,
               ": tag must be in [0, ", s.tag_ub, "], got ", tag);
}
}  // namespace

Request MpiCommunicator::isend(std::span<const std::byte> data, int dest, int tag) {
  check_peer_and_tag(*state_, "isend", dest, tag);
  return Request(std::make_unique<detail::MpiRequest>(
                     state_, detail::MpiRequest::Spec{state_->p2p, true, data.data(), nullptr,
                                                      data.size(), dest, tag, std::to_string(tag),
                                                      timeout_}),
                 timeout_);
}

Request MpiCommunicator::irecv(std::span<std::byte> data, int src, int tag) {
  check_peer_and_tag(*state_, "irecv", src, tag);
  return Request(std::make_unique<detail::MpiRequest>(
                     state_, detail::MpiRequest::Spec{state_->p2p, false, nullptr, data.data(),
                                                      data.size(), src, tag, std::to_string(tag),
                                                      timeout_}),
                 timeout_);
}

detail::CollectiveChannel MpiCommunicator::channel() {
  detail::CollectiveChannel ch;
  ch.rank = state_->rank;
  ch.size = state_->size;
  ch.memory = &process_memory();
  ch.send = [this](std::span<const std::byte> data, int dest) {
    return Request(std::make_unique<detail::MpiRequest>(
                       state_, detail::MpiRequest::Spec{state_->coll, true, data.data(), nullptr,
                                                        data.size(), dest, 0, "collective",
                                                        timeout_}),
                   timeout_);
  };
  ch.recv = [this](std::span<std::byte> data, int src) {
    return Request(std::make_unique<detail::MpiRequest>(
                       state_, detail::MpiRequest::Spec{state_->coll, false, nullptr, data.data(),
                                                        data.size(), src, 0, "collective",
                                                        timeout_}),
                   timeout_);
  };
  return ch;
}

void MpiCommunicator::allreduce_sum(std::span<float> data) {
  detail::allreduce_sum(channel(), data);
}

void MpiCommunicator::allreduce_sum(std::span<double> data) {
  detail::allreduce_sum(channel(), data);
}

void MpiCommunicator::all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
  detail::all_to_all(channel(), send, recv);
}

void MpiCommunicator::barrier() { detail::barrier(channel()); }

}  // namespace cpattn
