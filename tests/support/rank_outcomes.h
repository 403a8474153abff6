// What every in-process rank of a failing group threw, for tests that check that all ranks fail
// alike (same code, a message naming the culprit).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"

namespace cpattn::testing {

/// Per rank: the code and message of the cpattn::Error it threw, or kInternal and "" when it
/// threw none.
struct RankOutcomes {
  std::vector<ErrorCode> codes;
  std::vector<std::string> messages;
};

/// Runs fn on P in-process ranks (run_ranks) and records every rank's error; the group's own
/// rethrow is swallowed, so a test sees all ranks, not just the first failure.
inline RankOutcomes run_all(int P, const std::function<void(Communicator&)>& fn) {
  RankOutcomes o{std::vector<ErrorCode>(static_cast<size_t>(P), ErrorCode::kInternal),
                 std::vector<std::string>(static_cast<size_t>(P))};
  try {
    run_ranks(P, [&](Communicator& comm) {
      try {
        fn(comm);
      } catch (const Error& e) {
        o.codes[static_cast<size_t>(comm.rank())] = e.code();
        o.messages[static_cast<size_t>(comm.rank())] = e.what();
        throw;
      }
    });
  } catch (const Error&) {
  }
  return o;
}

}  // namespace cpattn::testing
