// The ring and every other CP strategy under mpirun (registered for 2, 3 and 4 processes in
// tests.cmake): each process is one rank of an MpiCommunicator. Gathered results must pass the
// reference tolerance rule and be bitwise equal to the same ring run with in-process ranks (the
// transport must not change a bit).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/attention.h"
#include "cpattn/cp_options.h"
#include "cpattn/error.h"
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
    // Bidirectional documents on contiguous shards: at 4 processes blocks 1-3 go straight from
    // their home to the ranks that need them (RelayPlan::direct) while block 0 is relayed.
    {Layout::kContiguous,
     spec(reference::MaskKind::kDocs, 1025, 4, 2, 16, 8, 0.1f, MemoryLayout::kBSHD, 68)},
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

// Every strategy the group size allows (ulysses needs Hq % P == 0: 12 query heads serve P = 2, 3
// and 4; hybrid grids U x R = P), bitwise equal to in-process ranks: the transport must not
// change a bit of the all-to-alls, the sub-communicators or the rank-order sums.
std::vector<Strategy> strategies_for(int P) {
  std::vector<Strategy> s = {Strategy::ring(), Strategy::allgather(), Strategy::ulysses()};
  for (int u = 1; u <= P; ++u) {
    if (P % u == 0) s.push_back(Strategy::hybrid(u, P / u));
  }
  return s;
}

// With sinks, softcap, ALiBi and mask slices (dsink summed by an allreduce over processes).
reference::CaseSpec featured(reference::CaseSpec s) {
  s.sink = true;
  s.softcap = 4.0f;
  s.alibi = true;
  return s;
}

TEST(MpiStrategies, EveryStrategyMatchesReferenceAndInProcessRanksBitwise) {
  Communicator& comm = *g_comm;
  const std::vector<MpiCase> cases = {
      {Layout::kZigzag,
       spec(reference::MaskKind::kDocsCausal, 97, 12, 4, 16, 8, 0.1f, MemoryLayout::kBSHD, 65)},
      {Layout::kStriped,
       spec(reference::MaskKind::kWindow, 61, 12, 1, 8, 8, 0.0f, MemoryLayout::kSBHD, 66)},
      {Layout::kContiguous,
       spec(reference::MaskKind::kCausal, 5, 12, 12, 8, 16, 0.1f, MemoryLayout::kBHSD, 67)},
      {Layout::kZigzag, featured(spec(reference::MaskKind::kSharedPrefixSlices, 97, 12, 4, 16, 8,
                                      0.1f, MemoryLayout::kBSHD, 69))},
      {Layout::kContiguous, featured(spec(reference::MaskKind::kDocSlices, 130, 12, 1, 8, 8, 0.1f,
                                          MemoryLayout::kBSHD, 70))},
  };
  for (const MpiCase& c : cases) {
    const reference::Problem p = reference::make_problem(c.spec);
    const reference::Oracle oracle = reference::make_oracle(p);
    for (const Strategy& strategy : strategies_for(comm.size())) {
      try {
        check_strategy(strategy, comm.size(), c.spec.dims.Hq, c.spec.dims.Hkv);
      } catch (const Error&) {
        continue;  // e.g. 4 kv heads neither shard nor replicate over 3 ranks
      }
      SCOPED_TRACE(strategy_name(strategy) + " " + reference::case_name(c.spec));
      RingRun run{comm.size(), c.layout, c.spec.layout};
      run.strategy = strategy;
      const reference::Outputs got = run_ring_gathered(comm, p, run);
      EXPECT_TRUE(row_passes(reference::compare(strategy_name(strategy), oracle, got)));
      EXPECT_TRUE(testing::outputs_bitwise_equal(got, run_ring(p, run)));
      comm.barrier();
    }
  }
}

// The call agreement over MPI processes: a process that refuses its own arguments, one that
// skips a call, and one whose sinks, softcap, ALiBi slopes or slices differ, fail every process
// at the same call (the others quoting or naming it), and the group stays in step for the calls
// that follow.
TEST(MpiCallAgreement, ARefusalAndASkippedCallFailEveryProcess) {
  Communicator& comm = *g_comm;
  const int P = comm.size();
  const int last = P - 1;
  const int64_t S = 16L * P;
  Tensor x({1, S, 2, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>(i % 13) * 0.1f;
  const SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, S, P, comm.rank());
  const Tensor xr = shard_tensor(x.view(), seq, comm.rank());
  const auto outcome = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(ErrorCode::kInternal, std::string());
  };
  AttentionParams params;
  params.causal = true;
  params.dropout_p = comm.rank() == last ? 1.0f : 0.1f;  // the last process's are invalid
  auto [code, message] = outcome([&] {
    attention_forward(comm, xr.view(), xr.view(), xr.view(), seq, params, {1, 0});
  });
  if (comm.rank() == last) {
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << message;
  } else {
    EXPECT_EQ(code, ErrorCode::kRankDisagreement) << message;
    EXPECT_NE(message.find("rank " + std::to_string(last) + " refuses the call (invalid_argument"),
              std::string::npos)
        << message;
  }
  params.dropout_p = 0.0f;
  CpOptions eval, train;
  eval.call_site = "eval";
  train.call_site = "train";
  std::tie(code, message) = outcome([&] {
    if (comm.rank() != last) {  // the last process skips the eval forward
      attention_forward(comm, xr.view(), xr.view(), xr.view(), seq, params, {1, 0}, eval);
    }
    attention_forward(comm, xr.view(), xr.view(), xr.view(), seq, params, {1, 0}, train);
  });
  EXPECT_EQ(code, ErrorCode::kRankDisagreement) << message;
  EXPECT_NE(message.find("the calls come from different call sites"), std::string::npos) << message;
  // The last process alone differs in one score feature or the slices: every process names it.
  const std::vector<std::pair<std::string, std::function<void(AttentionParams&)>>> variants = {
      {"sink digest",
       [](AttentionParams& p) {
         p.sink = {0.5f, 0.5f};
       }},
      {"softcap", [](AttentionParams& p) { p.softcap = 2.0f; }},
      {"alibi_slopes digest",
       [](AttentionParams& p) {
         p.alibi_slopes = {0.5f, 0.25f};
       }},
      {"slices digest",
       [S](AttentionParams& p) {
         p.slices = {{0, S, 0, S, SliceType::kCausal}};
       }},
  };
  for (const auto& [label, change] : variants) {
    AttentionParams mine;
    mine.causal = true;
    if (comm.rank() == last) change(mine);
    std::tie(code, message) = outcome([&] {
      attention_forward(comm, xr.view(), xr.view(), xr.view(), seq, mine, {1, 0}, train);
    });
    EXPECT_EQ(code, ErrorCode::kRankDisagreement) << message;
    EXPECT_NE(message.find("rank " + std::to_string(last) + " has " + label), std::string::npos)
        << message;
  }
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
