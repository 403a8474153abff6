// Ring-exchange bandwidth of the communicators next to plain memcpy measured in the same run
// (docs/performance.md, "Communicators"). A table program rather than Google Benchmark: a ring
// step is a group-wide event timed across P ranks (threads or processes), not a loop in one.
//   bench_comm              in-process ranks (ThreadCommunicator), P = 2 and 4
//   mpirun -n P bench_comm  MPI ranks (MpiCommunicator), P = the job size
// Each rank sends B bytes to rank + 1 and receives B from rank - 1 per step. Bandwidth is
// aggregate: P * B / step time, a step timed from a barrier to the barrier after every rank
// finished (the slowest rank's view). The memcpy baseline is timed the same way with every rank
// copying B bytes between its own buffers, so both see the same cores and memory-system load
// (with more ranks than cores, neither can run all P copies at once).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#ifdef CPATTN_HAVE_MPI
#include "cpattn/mpi_communicator.h"
#endif

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSizesMiB[] = {1, 4, 16, 64, 256};

// Enough steps for ~1 GiB moved per rank, at least 3 (the best step counts: it is the least
// disturbed by the other work on the machine).
int steps_for(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 3, 50));
}

// The slowest rank's time of one step, known to every rank (max via allreduce of one slot each).
double slowest(cpattn::Communicator& comm, double mine) {
  std::vector<double> all(static_cast<size_t>(comm.size()), 0.0);
  all[static_cast<size_t>(comm.rank())] = mine;
  comm.allreduce_sum(std::span<double>(all));
  return *std::max_element(all.begin(), all.end());
}

struct Result {
  double memcpy_gbs = 0;
  double ring_gbs = 0;
};

// Runs on every rank; returns aggregate GB/s (1e9 bytes/s) of both measurements.
Result measure(cpattn::Communicator& comm, size_t bytes) {
  const int p = comm.size();
  const int next = (comm.rank() + 1) % p;
  const int prev = (comm.rank() + p - 1) % p;
  std::vector<std::byte> out(bytes, std::byte{1});
  std::vector<std::byte> in(bytes, std::byte{0});
  const double total = static_cast<double>(bytes) * p;
  double best_copy = 1e30;
  double best_ring = 1e30;
  auto group_time = [&](const std::function<void()>& step) {
    comm.barrier();
    const cpattn::Stopwatch t;
    step();
    comm.barrier();
    return slowest(comm, t.seconds());
  };
  for (int s = -1; s < steps_for(bytes); ++s) {  // step -1 warms up (page faults, matching)
    const double copy = group_time([&] { std::memcpy(in.data(), out.data(), bytes); });
    const double ring = group_time([&] {
      cpattn::Request r = comm.irecv(std::span<std::byte>(in), prev, 0);
      cpattn::Request w = comm.isend(std::span<const std::byte>(out), next, 0);
      r.wait();
      w.wait();
    });
    if (s >= 0) {
      best_copy = std::min(best_copy, copy);
      best_ring = std::min(best_ring, ring);
    }
  }
  return {total / best_copy / 1e9, total / best_ring / 1e9};
}

void print_header() {
  std::printf("| backend | P | message | memcpy GB/s (same P) | ring GB/s | ring / memcpy |\n");
  std::printf("|---|---|---|---|---|---|\n");
}

void print_row(const char* backend, int p, size_t mib, const Result& r) {
  std::printf("| %s | %d | %zu MiB | %.2f | %.2f | %.2f |\n", backend, p, mib, r.memcpy_gbs,
              r.ring_gbs, r.ring_gbs / r.memcpy_gbs);
  std::fflush(stdout);
}

void thread_bench() {
  print_header();
  for (int p : {2, 4}) {
    for (size_t mib : kSizesMiB) {
      Result result;
      std::mutex mu;
      cpattn::run_ranks(p, [&](cpattn::Communicator& comm) {
        const Result r = measure(comm, mib * kMiB);
        if (comm.rank() == 0) {
          std::lock_guard lock(mu);
          result = r;
        }
      });
      print_row("thread", p, mib, result);
    }
  }
}

#ifdef CPATTN_HAVE_MPI
bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

int mpi_bench(int argc, char** argv) {
  return cpattn::mpi_main(argc, argv, [](cpattn::MpiCommunicator& comm) {
    if (comm.rank() == 0) print_header();
    for (size_t mib : kSizesMiB) {
      const Result r = measure(comm, mib * kMiB);
      if (comm.rank() == 0) print_row("mpi", comm.size(), mib, r);
    }
    return 0;
  });
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef CPATTN_HAVE_MPI
  if (under_mpirun()) return mpi_bench(argc, argv);
#else
  (void)argc;
  (void)argv;
#endif
  thread_bench();
  return 0;
}
