// run_mpi_job (cli/job.h): clean exits for errors every rank shares, MPI_Abort for the others.
#ifdef CPATTN_HAVE_MPI
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <new>

#include "cli/job.h"
#include "train/agreement.h"

namespace cpattn::cli {

namespace {

[[noreturn]] void abort_job(Communicator& world, const char* code, const char* what, int status) {
  std::fprintf(stderr, "cpattn: rank %d: error (%s): %s\n", world.rank(), code, what);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

// The ranks leave together (bounded by the deadline): MPI_Finalize has no timeout.
void leave_together(Communicator& world) {
  try {
    world.barrier();
  } catch (const Error& e) {
    abort_job(world, error_code_name(e.code()), e.what(), exit_status(e));
  }
}

}  // namespace

int run_mpi_job(Communicator& world, const std::function<int()>& fn) {
  int status = 0;
  try {
    status = fn();
  } catch (const train::GroupError& e) {
    print_error(e);
    status = exit_status(e);
  } catch (const Error& e) {
    abort_job(world, error_code_name(e.code()), e.what(), exit_status(e));
  } catch (const std::bad_alloc& e) {
    abort_job(world, "out_of_memory", out_of_memory_message(e, "").c_str(), kExitOutOfMemory);
  } catch (const std::exception& e) {
    abort_job(world, "unknown", e.what(), 2);
  }
  leave_together(world);
  return status;
}

}  // namespace cpattn::cli
#endif  // CPATTN_HAVE_MPI
