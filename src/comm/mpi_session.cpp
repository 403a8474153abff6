// MPI initialisation, error conversion and the abort-on-error wrapper of the MPI backend.
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "comm/mpi_state.h"
#include "cpattn/backend.h"
#include "cpattn/error.h"
#include "cpattn/mpi_communicator.h"

namespace cpattn {

namespace detail {

bool mpi_active() noexcept {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

void check_mpi(int rc, std::string_view who, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(
      ErrorCode::kCommunication,
      str_cat(who, ": ", call, " failed: ",
              len > 0 ? std::string(text, static_cast<size_t>(len)) : str_cat("MPI error ", rc)));
}

namespace {
// Held around every MPI call of the process when MPI lacks MPI_THREAD_MULTIPLE.
std::mutex& global_mpi() {
  static std::mutex mu;
  return mu;
}
}  // namespace

std::string MpiState::label(int r) const {
  return backend::rank_label(
      r, group_ranks.empty() ? std::nullopt : std::optional(group_ranks[static_cast<size_t>(r)]));
}

MpiLock MpiState::lock() {
  // Lock order: global before state, everywhere.
  MpiLock l;
  if (serialize) l.global = std::unique_lock<std::mutex>(global_mpi());
  l.state = std::unique_lock<std::mutex>(mu);
  return l;
}

MpiLock MpiState::try_lock() {
  MpiLock l;
  if (serialize) {
    l.global = std::unique_lock<std::mutex>(global_mpi(), std::try_to_lock);
    if (!l.global.owns_lock()) return {};
  }
  l.state = std::unique_lock<std::mutex>(mu, std::try_to_lock);
  if (!l.state.owns_lock()) return {};
  return l;
}

MpiState::~MpiState() {
  if (!mpi_active()) return;
  if (p2p != MPI_COMM_NULL) MPI_Comm_free(&p2p);
  if (coll != MPI_COMM_NULL) MPI_Comm_free(&coll);
}

}  // namespace detail

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized == 0) {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    CPATTN_CHECK(rc == MPI_SUCCESS, ErrorCode::kCommunication, "MPI_Init_thread failed (error ", rc,
                 ")");
    owns_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // Errors come back as codes and become cpattn::Error (the default handler aborts silently).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  if (owns_ && detail::mpi_active()) MPI_Finalize();
}

int mpi_abort_on_error(const std::function<int()>& fn) noexcept {
  std::string what;
  int code = 1;
  try {
    return fn();
  } catch (const Error& e) {
    what = e.what();
    code = static_cast<int>(e.code());
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  int rank = -1;
  const bool active = detail::mpi_active();
  if (active) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "cpattn: rank %d: fatal: %s\n", rank, what.c_str());
  std::fflush(stderr);
  // Ends every process of the job: the peers of a failed rank would otherwise wait for it.
  if (active) MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

int mpi_main(int argc, char** argv, const std::function<int(MpiCommunicator&)>& fn) {
  std::unique_ptr<MpiSession> session;
  try {
    session = std::make_unique<MpiSession>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpattn: fatal: %s\n", e.what());
    return static_cast<int>(ErrorCode::kCommunication);
  }
  return mpi_abort_on_error([&] {
    MpiCommunicator comm;
    const int status = fn(comm);
    // Leave together, under the deadline: MPI_Finalize is a fence with no timeout, and OpenMPI's
    // mpirun can hang when one rank sits in it while another aborts.
    comm.barrier();
    return status;
  });
}

}  // namespace cpattn
