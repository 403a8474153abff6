// The ring under mpirun (registered for 2 and 4 processes in tests.cmake): each process is one
// rank of an MpiCommunicator. Gathered results must pass the reference tolerance rule and be
// bitwise equal to the same ring run with in-process ranks (the transport must not change a bit).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/mpi_communicator.h"
#include "support/metrics.h"
#include "support/mpi_gtest_main.h"
#include "verify/reference_case.h"

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

class MpiRing : public ::testing::TestWithParam<MpiCase> {};

TEST_P(MpiRing, MatchesReferenceAndInProcessRanksBitwise) {
  Communicator& comm = *g_comm;
  const MpiCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  const RingRun run{comm.size(), c.layout, c.spec.layout};
  const reference::Outputs got = run_ring_gathered(comm, p, run);
  EXPECT_TRUE(
      row_passes(reference::compare(reference::case_name(c.spec), reference::make_oracle(p), got)));
  const reference::Outputs threads = run_ring(p, run);
  EXPECT_TRUE(testing::outputs_bitwise_equal(got, threads));
  comm.barrier();
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiRing, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MpiCase>& tp) {
                           return reference::case_name(tp.param.spec) + "_" +
                                  layout_name(tp.param.layout);
                         });

}  // namespace
}  // namespace cpattn::testing

int main(int argc, char** argv) {
  // A bug fails the job after the timeout instead of hanging it.
  return cpattn::testing::mpi_gtest_main(
      argc, argv, std::chrono::seconds(60),
      [](cpattn::MpiCommunicator& comm) { cpattn::testing::g_comm = &comm; });
}
