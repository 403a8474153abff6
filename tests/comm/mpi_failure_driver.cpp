// Failure scenarios under mpirun, run by tests.cmake through expect_failure.sh: the job must end
// with a non-zero status and a one-line reason, within the deadline, instead of hanging.
//   throw       rank 1 throws in the middle of a ring (timeout 60 s: only MPI_Abort ends it fast)
//   early-exit  rank 1 returns at once; the others' ring waits time out after 2 s
//   abandoned-send  rank 0's 4 MiB send to rank 1, which posts no receive, times out and is
//               given up on; rank 0's next request is refused (the send stays in MPI)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/mpi_communicator.h"

namespace {

void ring(cpattn::Communicator& comm, int steps, int throwing_rank) {
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  std::vector<float> out(1 << 16, 1.0f);
  std::vector<float> in(out.size());
  for (int step = 0; step < steps; ++step) {
    if (comm.rank() == throwing_rank && step == 2) {
      throw std::runtime_error("injected failure at ring step 2");
    }
    cpattn::Request r = comm.irecv(std::span<float>(in), prev, step);
    cpattn::Request s = comm.isend(std::span<const float>(out), next, step);
    r.wait();
    s.wait();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "early-exit" && mode != "abandoned-send") {
    std::fprintf(stderr, "usage: %s throw|early-exit|abandoned-send\n", argv[0]);
    return 2;
  }
  return cpattn::mpi_main(argc, argv, [&](cpattn::MpiCommunicator& comm) {
    if (mode == "throw") {
      comm.set_timeout(std::chrono::seconds(60));
      ring(comm, 10, 1);
    } else if (mode == "abandoned-send") {
      comm.set_timeout(std::chrono::milliseconds(200));
      if (comm.rank() == 0) {
        const std::vector<float> big(1 << 20, 1.0f);
        try {
          comm.isend(std::span<const float>(big), 1, 7).wait();
        } catch (const cpattn::Error&) {  // timed out: the send is given up on
        }
        const std::vector<float> small(4, 1.0f);
        comm.isend(std::span<const float>(small), 1, 8).wait();  // refused
      } else {
        std::this_thread::sleep_for(std::chrono::seconds(5));
      }
    } else {
      comm.set_timeout(std::chrono::seconds(2));
      if (comm.rank() == 1) return 0;
      ring(comm, 10, -1);
    }
    return 0;
  });
}
