// One isend or irecv of the MPI backend: chunked messages, ordered probe-then-receive matching
// and polled deadlines.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/mpi_state.h"
#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn::detail {

/// Wire format: a message is sent as chunks of at most chunk_bytes, the last one shorter than
/// chunk_bytes (possibly empty), so the receiver knows where a message ends. A receive probes each
/// chunk (MPI_Improbe, which also yields its size), receives it into place if it fits, and
/// otherwise drains the rest of the message into scratch and fails naming both sizes; MPI never
/// sees a buffer smaller than its message (OpenMPI's self transport overruns such a buffer).
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
    std::string tag_label;  // "7" or "collective"
    std::chrono::milliseconds timeout;
  };

  /// Posts the send chunks, or queues the receive. Throws Error(kCommunication) on an MPI error,
  /// and Error(kInvalidArgument) when called off the main thread below MPI_THREAD_SERIALIZED.
  MpiRequest(std::shared_ptr<MpiState> state, Spec spec);
  ~MpiRequest() override;

  /// Advances every pending receive of `state`, each (communicator, source, tag) queue from its
  /// head in posting order, without blocking; with no receive pending, one MPI_Iprobe drives
  /// MPI's progress engine for the posted sends. An MPI error is kept by the receive it hit
  /// (its wait throws it). Requires the lock. For MpiCommunicator::progress.
  static void progress_all(MpiState& state) noexcept;

  bool test() override;
  size_t wait(std::chrono::steady_clock::time_point deadline) override;
  void cancel() noexcept override;

 private:
  enum class Phase { kPending, kDone, kCancelled };

  // This request's (communicator, peer, tag).
  MpiState::Key key() const;
  // The queue this receive waits in. Requires the lock.
  std::deque<MpiRequest*>& queue();
  // Throws Error(kInvalidArgument) when MPI is below MPI_THREAD_SERIALIZED and this is not the
  // main thread (a kernel worker waiting on the ring's accumulator), instead of calling MPI.
  void check_thread() const;
  // Advances the receives of `q` from its head, in order, until the head is pending, the queue is
  // empty or `until` (when not null) finished; an error (MPI's, or no memory for a chunk's
  // scratch) finishes the head it hit, with it.
  // Requires the lock.
  static void advance(std::deque<MpiRequest*>& q, const MpiRequest* until);
  // Advances this receive (the head of its queue); true once it finished. Requires the lock.
  bool progress_head();
  // Requires the lock. Sends: true once every chunk completed.
  bool progress_send();
  // Records and throws `e` (later waits rethrow it).
  [[noreturn]] void fail(const Error& e);
  std::string describe() const;

  std::shared_ptr<MpiState> state_;
  Spec spec_;
  Phase phase_ = Phase::kPending;
  std::vector<MPI_Request> pending_;  // send: every chunk; recv: the chunk being received
  size_t chunk_ = 0;                  // recv: size of the chunk being received
  size_t transferred_ = 0;            // recv: bytes that fit (or, draining, seen so far)
  bool draining_ = false;             // recv: the message did not fit; discarding it
  bool skipping_ = false;     // recv: discarding the rest of a cancelled receive's message first
  bool mid_message_ = false;  // recv: the last chunk completed was full (more of it follow)
  std::vector<std::byte> drain_;  // scratch for the chunk being discarded
  std::optional<Error> error_;    // rethrown by later waits
};

}  // namespace cpattn::detail
