// The OpenMPI backend (docs/design.md section 7): MpiSession (init/finalize), MpiCommunicator, and
// the abort-on-error wrapper that makes a failing rank end the whole `mpirun` job instead of
// hanging. Available when cpattn was built with MPI (CPATTN_HAVE_MPI).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <span>

#include "cpattn/communicator.h"

namespace cpattn {

namespace detail {
struct MpiState;
}  // namespace detail
namespace backend {
struct CollectiveChannel;
}  // namespace backend

/// RAII owner of MPI initialisation. Requests MPI_THREAD_MULTIPLE; when the library grants less,
/// every MpiCommunicator serialises its MPI calls with a mutex (enough for
/// MPI_THREAD_SERIALIZED; below it only the main thread may call MPI, see MpiCommunicator). Sets
/// MPI_ERRORS_RETURN on MPI_COMM_WORLD so MPI errors become cpattn::Error instead of killing the
/// process silently. Finalizes MPI on destruction if it initialised it. One per process.
class MpiSession {
 public:
  /// argc/argv as given to main (may be null). Throws Error(kCommunication) if MPI_Init fails.
  MpiSession(int* argc, char*** argv);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession();

  /// True if MPI granted MPI_THREAD_MULTIPLE.
  bool thread_multiple() const { return thread_multiple_; }

 private:
  bool owns_ = false;
  bool thread_multiple_ = false;
};

/// Options of MpiCommunicator; must be equal on every rank.
struct MpiOptions {
  /// Messages are sent as chunks of at most this many bytes (MPI counts are int). Lowering it
  /// exercises the chunking in tests. A message of >= chunk_bytes must not share (source, tag)
  /// with another irecv pending at the same time.
  size_t chunk_bytes = size_t{1} << 30;
};

/// A rank of an MPI communicator. Point-to-point messages use a private duplicate of the given
/// communicator and collectives another, so neither can match the other's or the caller's
/// messages. Waits poll MPI_Test with short sleeps until their deadline, so a dead peer costs at
/// most the timeout. Messages of any size are split into chunks below 2^31 bytes; a receive
/// cancelled part-way through a chunked message leaves the rest to be discarded by the next
/// receive on that (source, tag), never taken as its message. A send cancelled while unmatched
/// cannot be taken back (OpenMPI ignores MPI_Cancel on sends): after it, every request on this
/// communicator throws Error(kCommunication) naming that send (make a new MpiCommunicator to go
/// on, or end the job), never a later receive of the peer taking it. Below MPI_THREAD_SERIALIZED a
/// request posted or waited on off the main thread throws Error(kInvalidArgument) instead of
/// calling MPI (the ring's backward waits from a kernel worker when num_threads > 1).
class MpiCommunicator final : public Communicator {
 public:
  /// Collective over `comm` (duplicates it). Requires MPI to be initialised (MpiSession); throws
  /// Error(kInvalidArgument) otherwise and Error(kCommunication) on an MPI error.
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, const MpiOptions& options = {});
  ~MpiCommunicator() override;

  // The Communicator hooks (communicator.h).
 protected:
  int do_rank() const override;
  int do_size() const override;
  /// Tags must be in [0, MPI_TAG_UB] (2^31 - 1 with OpenMPI).
  Request do_isend(std::span<const std::byte> data, int dest, int tag) override;
  /// A message larger than `data` throws Error(kCommunication) from wait() (MPI_ERR_TRUNCATE:
  /// MPI reports only the buffer size).
  Request do_irecv(std::span<std::byte> data, int src, int tag) override;
  /// Same reduction order and bits as ThreadCommunicator (reduce-scatter in rank order).
  void do_allreduce_sum(std::span<float> data) override;
  void do_allreduce_sum(std::span<double> data) override;
  void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void do_barrier() override;
  /// Advances every pending receive of this communicator (matching each (source, tag) queue's
  /// receives in posting order, as wait() does) and lets MPI's progress engine move the posted
  /// sends. Without blocking: a call finding another thread inside this communicator, or MPI
  /// finalized, returns at once; below MPI_THREAD_SERIALIZED only the main thread calls MPI.
  void do_progress() noexcept override;
  /// MPI_Comm_split of this communicator (after the (color, key) exchange of communicator.h),
  /// wrapped in a new MpiCommunicator with this one's timeout and chunk size. MPI_Comm_split has
  /// no deadline of its own; the exchange before it makes sure every rank has arrived.
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  /// The process counter: one rank per process.
  MemoryCounter& do_memory() override;

 private:
  backend::CollectiveChannel channel();

  std::shared_ptr<detail::MpiState> state_;  // shared with pending requests
};

/// Runs fn(); if it throws, prints one line "cpattn: rank R: fatal: <what>" to stderr and calls
/// MPI_Abort(MPI_COMM_WORLD, code) so that mpirun ends the whole job (code: the ErrorCode's
/// value, or 1 for other exceptions). Returns fn()'s result otherwise. MPI must be initialised.
int mpi_abort_on_error(const std::function<int()>& fn) noexcept;

/// A main() for MPI programs: MpiSession, an MpiCommunicator on MPI_COMM_WORLD, and
/// mpi_abort_on_error around fn, then a barrier under the communicator's deadline before MPI is
/// finalized (a rank that returns while its peers still wait for it ends the job after the
/// timeout instead of hanging). Returns fn's exit status.
int mpi_main(int argc, char** argv, const std::function<int(MpiCommunicator&)>& fn);

}  // namespace cpattn
