// State shared by an MpiCommunicator and its pending requests, and the MPI error/lock helpers.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace cpattn::detail {

class MpiRequest;

/// Held while a request touches MPI or the receive queues: the state's mutex, plus the process-wide
/// MPI mutex when MPI lacks MPI_THREAD_MULTIPLE (then no two MPI calls may overlap anywhere).
struct MpiLock {
  std::unique_lock<std::mutex> global;
  std::unique_lock<std::mutex> state;

  bool owns() const { return state.owns_lock(); }
};

/// The duplicated communicators of one MpiCommunicator and its pending receives. Freed when the
/// communicator and all its requests are gone (and only while MPI is still initialised).
struct MpiState {
  MPI_Comm p2p = MPI_COMM_NULL;   // user isend/irecv
  MPI_Comm coll = MPI_COMM_NULL;  // collectives (tag 0)
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;  // MPI guarantees at least this
  size_t chunk_bytes = size_t{1} << 30;
  int thread_level = MPI_THREAD_SINGLE;  // what MPI provides (MPI_Query_thread)
  bool serialize = false;                // MPI lacks MPI_THREAD_MULTIPLE
  std::mutex mu;
  /// Pending receives per (communicator, source, tag) in posting order. Only the head of a queue
  /// probes and receives, so messages match receives in posting order whatever order they are
  /// waited on (a receive is matched by MPI_Improbe only once its size is known to fit).
  using Key = std::tuple<MPI_Comm, int, int>;  // (communicator, source, tag)
  std::map<Key, std::deque<MpiRequest*>> recv_queues;
  /// The (communicator, source, tag)s whose next chunks are the rest of a message whose receive
  /// was cancelled part-way (a chunked message, progress() or test() having taken its first
  /// chunks): the next receive there discards them before it takes its own message.
  std::set<Key> abandoned;
  /// What the first send given up on while unmatched was ("isend to rank 1 (tag 4096, ...)";
  /// empty: none). OpenMPI cannot cancel a send, so it stays in MPI reading the caller's
  /// buffer, and a later receive of the peer on its (source, tag) would take it for its own
  /// message: every later request on this communicator is refused.
  std::string abandoned_send;

  /// A split communicator's ranks in the communicator the splits started from (rank r is
  /// group_ranks[r]; empty for one that no split made): what label() names in errors.
  std::vector<int> group_ranks;

  MpiState() = default;
  MpiState(const MpiState&) = delete;
  MpiState& operator=(const MpiState&) = delete;
  ~MpiState();

  /// Rank `rank` of this communicator in errors: backend::rank_label ("rank 1", or "rank 1 of a
  /// sub-group (group rank 3)").
  std::string label(int rank) const;

  MpiLock lock();
  /// As lock(), but gives up at once when another thread holds a mutex it needs: then the
  /// MpiLock owns nothing (owns() is false).
  MpiLock try_lock();
};

/// True while MPI calls are allowed (initialised and not finalized).
bool mpi_active() noexcept;

/// Throws Error(kCommunication) "<who>: <call> failed: <MPI error string>" unless rc is
/// MPI_SUCCESS (`who`: the calling rank, MpiState::label).
void check_mpi(int rc, std::string_view who, const char* call);

}  // namespace cpattn::detail
