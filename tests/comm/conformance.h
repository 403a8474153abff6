// The Communicator conformance suite: test bodies written against Communicator&, run by every
// rank of a group, on in-process ranks (thread_conformance_test.cpp), under mpirun
// (mpi_conformance_main.cpp) and on torch ProcessGroupGloo processes
// (python/tests/process_group_conformance_main.cpp). Failures are reported with GoogleTest
// assertions.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cpattn/communicator.h"

namespace cpattn::testing {

/// One conformance check. run(comm) is called on every rank of a group of any size.
struct ConformanceCase {
  std::string name;  ///< a GoogleTest-safe name, e.g. "Ring_64MiB"
  std::function<void(Communicator&)> run;
  int max_ranks = 1 << 20;  ///< skipped for larger groups (memory of the in-process suite)
};

/// Every case of the suite.
std::vector<ConformanceCase> conformance_cases();

/// Deterministic test bytes for message (src, dst, tag), `n` bytes long.
std::vector<std::byte> message_bytes(int src, int dst, int tag, size_t n);

}  // namespace cpattn::testing
