// The ring under mpirun (registered for 2 and 4 processes in tests.cmake): each process is one
// rank of an MpiCommunicator. Gathered results must pass the reference tolerance rule and be
// bitwise equal to the same ring run with in-process ranks (the transport must not change a bit).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/mpi_communicator.h"
#include "kernel/reference_case.h"
#include "support/metrics.h"

namespace cpattn::testing {
namespace {

MpiCommunicator* g_comm = nullptr;  // constructed once, collectively, in main

struct MpiCase {
  Layout layout;
  reference::CaseSpec spec;
};

reference::CaseSpec spec(reference::MaskKind mask, int64_t S, int64_t hq, int64_t hkv, int64_t dqk,
                         int64_t dv, float dropout, MemoryLayout layout, uint64_t seed) {
  reference::CaseSpec s;
  s.mask = mask;
  s.dims = {1, S, S, hq, hkv, dqk, dv};
  s.dropout_p = dropout;
  s.layout = layout;
  s.seed = seed;
  return s;
}

const std::vector<MpiCase> kCases = {
    {Layout::kZigzag,
     spec(reference::MaskKind::kCausal, 97, 8, 2, 16, 16, 0.1f, MemoryLayout::kBSHD, 61)},
    {Layout::kStriped,
     spec(reference::MaskKind::kDocsCausal, 301, 2, 1, 16, 16, 0.0f, MemoryLayout::kBHSD, 62)},
    {Layout::kContiguous,
     spec(reference::MaskKind::kWindow, 97, 2, 1, 192, 128, 0.1f, MemoryLayout::kSBHD, 63)},
    {Layout::kZigzag,
     spec(reference::MaskKind::kCausal, 3, 2, 2, 8, 8, 0.0f, MemoryLayout::kBSHD, 64)},
};

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

class MpiRing : public ::testing::TestWithParam<MpiCase> {};

TEST_P(MpiRing, MatchesReferenceAndInProcessRanksBitwise) {
  Communicator& comm = *g_comm;
  const MpiCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  const RingRun run{comm.size(), c.layout, c.spec.layout};
  reference::Outputs got = zero_outputs(p.dims, true);
  run_ring_rank(comm, p, ProblemFloats(p), run, got);
  // Every row was written by exactly one rank and is 0 elsewhere, so a sum gathers them.
  for (std::vector<double>* t : {&got.out, &got.lse, &got.dq, &got.dk, &got.dv}) {
    // -inf rows would turn into NaN in a sum only with +inf elsewhere; other ranks hold 0 there.
    comm.allreduce_sum(std::span<double>(*t));
  }
  const reference::Outputs exact = reference::attention(p);
  const reference::Outputs fp32 = reference::attention_fp32(p);
  EXPECT_TRUE(row_passes(reference::compare(reference::case_name(c.spec), exact, fp32, got)));
  const reference::Outputs threads = run_ring(p, run);
  EXPECT_TRUE(bitwise_equal(got.out, threads.out));
  EXPECT_TRUE(bitwise_equal(got.lse, threads.lse));
  EXPECT_TRUE(bitwise_equal(got.dq, threads.dq));
  EXPECT_TRUE(bitwise_equal(got.dk, threads.dk));
  EXPECT_TRUE(bitwise_equal(got.dv, threads.dv));
  comm.barrier();
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiRing, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MpiCase>& tp) {
                           return reference::case_name(tp.param.spec) + "_" +
                                  layout_name(tp.param.layout);
                         });

// Prints only failed assertions, prefixed with the rank (for ranks other than 0).
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

}  // namespace
}  // namespace cpattn::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return cpattn::mpi_main(argc, argv, [](cpattn::MpiCommunicator& comm) {
    comm.set_timeout(std::chrono::seconds(60));  // a bug fails the job instead of hanging it
    cpattn::testing::g_comm = &comm;
    if (comm.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new cpattn::testing::RankFailurePrinter(comm.rank()));
    }
    const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    double any = failed;  // the job passes only if every rank passed
    comm.allreduce_sum(std::span<double>(&any, 1));
    return any > 0 ? 1 : 0;
  });
}
