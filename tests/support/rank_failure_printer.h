// A GoogleTest listener for multi-process suites: every rank but 0 prints only its failed
// assertions, prefixed with its rank (mpi_gtest_main.cpp, python/tests/
// process_group_conformance_main.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

namespace cpattn::testing {

/// Prints each failed assertion as "[rank R] file:line: summary" to stderr.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace cpattn::testing
