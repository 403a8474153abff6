// GoogleTest under mpirun (mpi_gtest_main.h). Compiled into the test support library of every
// build; empty without MPI.
#include "support/mpi_gtest_main.h"

#ifdef CPATTN_HAVE_MPI

#include <gtest/gtest.h>

#include <span>

#include "support/rank_failure_printer.h"

namespace cpattn::testing {

int mpi_gtest_main(int argc, char** argv, std::chrono::milliseconds timeout,
                   const std::function<void(MpiCommunicator&)>& set_up) {
  ::testing::InitGoogleTest(&argc, argv);
  return mpi_main(argc, argv, [&](MpiCommunicator& comm) {
    comm.set_timeout(timeout);
    set_up(comm);
    if (comm.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(comm.rank()));
    }
    const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    double any = failed;  // the job passes only if every rank passed
    comm.allreduce_sum(std::span<double>(&any, 1));
    if (any > 0 && comm.rank() == 0 && failed == 0) {
      std::fprintf(stderr, "a test failed on another rank (see its [rank N] lines)\n");
    }
    return any > 0 ? 1 : 0;
  });
}

}  // namespace cpattn::testing

#endif  // CPATTN_HAVE_MPI
