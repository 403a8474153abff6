// State shared by an MpiCommunicator and its pending requests, and the MPI error/lock helpers.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <mutex>

namespace cpattn::detail {

/// The duplicated communicators of one MpiCommunicator. Freed when the communicator and all its
/// requests are gone (and only while MPI is still initialised).
struct MpiState {
  MPI_Comm p2p = MPI_COMM_NULL;   // user isend/irecv
  MPI_Comm coll = MPI_COMM_NULL;  // collectives (tag 0)
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;  // MPI guarantees at least this
  size_t chunk_bytes = size_t{1} << 30;
  bool serialize = false;  // MPI lacks MPI_THREAD_MULTIPLE: one MPI call at a time
  std::mutex mu;

  MpiState() = default;
  MpiState(const MpiState&) = delete;
  MpiState& operator=(const MpiState&) = delete;
  ~MpiState();

  /// Holds mu while an MPI call runs if MPI is not thread-multiple.
  std::unique_lock<std::mutex> lock() {
    return serialize ? std::unique_lock<std::mutex>(mu) : std::unique_lock<std::mutex>();
  }
};

/// True while MPI calls are allowed (initialised and not finalized).
bool mpi_active() noexcept;

/// Throws Error(kCommunication) "rank R: <call> failed: <MPI error string>" unless rc is
/// MPI_SUCCESS.
void check_mpi(int rc, int rank, const char* call);

}  // namespace cpattn::detail
