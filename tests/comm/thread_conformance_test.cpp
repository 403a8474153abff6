// The conformance suite on in-process ranks, for groups of 1, 2, 3, 4 and 8 ranks.
#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"

namespace cpattn::testing {
namespace {

struct ThreadCase {
  int ranks;
  ConformanceCase check;
};

std::vector<ThreadCase> thread_cases() {
  std::vector<ThreadCase> out;
  for (int p : {1, 2, 3, 4, 8}) {
    for (ConformanceCase& c : conformance_cases()) {
      if (p <= c.max_ranks) out.push_back({p, std::move(c)});
    }
  }
  return out;
}

class ThreadConformance : public ::testing::TestWithParam<ThreadCase> {};

TEST_P(ThreadConformance, Run) {
  const ThreadCase& c = GetParam();
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(30);  // a bug fails the case instead of hanging
  run_ranks(c.ranks, c.check.run, options);
}

INSTANTIATE_TEST_SUITE_P(Thread, ThreadConformance, ::testing::ValuesIn(thread_cases()),
                         [](const ::testing::TestParamInfo<ThreadCase>& p) {
                           return detail::str_cat("P", p.param.ranks, "_", p.param.check.name);
                         });

}  // namespace
}  // namespace cpattn::testing
