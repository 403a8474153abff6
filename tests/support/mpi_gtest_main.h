// The main() of GoogleTest binaries run under mpirun: every process runs every test on its rank of
// MPI_COMM_WORLD; rank 0 prints the report, other ranks only their failures. MPI builds only.
#pragma once

#ifdef CPATTN_HAVE_MPI

#include <chrono>
#include <functional>

#include "cpattn/mpi_communicator.h"

namespace cpattn::testing {

/// InitGoogleTest, then mpi_main (MpiSession, an MpiCommunicator on MPI_COMM_WORLD, abort on an
/// escaping exception): sets the communicator's wait deadline to `timeout` (a bug fails the job
/// instead of hanging it), hands it to `set_up` (tests keep a pointer to it), replaces the
/// default printer on ranks other than 0 by one that prints "[rank R] file:line: message" for
/// failed assertions, and runs all tests. Returns 0 only if every rank passed.
int mpi_gtest_main(int argc, char** argv, std::chrono::milliseconds timeout,
                   const std::function<void(MpiCommunicator&)>& set_up);

}  // namespace cpattn::testing

#endif  // CPATTN_HAVE_MPI
