// AttentionWorkspace (cpattn/workspace.h): a call of any strategy that borrows its buffers from a
// caller-owned workspace gives bitwise the results of one that allocates them, whatever the
// workspace held from earlier calls (other shapes, dtypes, strategies); the workspace grows to the
// largest call, is charged to its own counter, refuses a second concurrent call and release()
// while in use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "cp/ring_detail.h"
#include "cp/ring_harness.h"
#include "cpattn/error.h"
#include "cpattn/memory.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::CaseSpec;
using reference::MaskKind;
using reference::PositionKind;
using reference::spec_of;

struct WorkspaceCall {
  CaseSpec spec;
  RingRun run;
};

// Calls of growing, shrinking and regrowing size, in fp32 and bf16, with documents, dropout,
// GQA, uneven shards, the plain and the document-aware relay, and every strategy (the hybrid's
// ring borrows through the hybrid call's lease).
std::vector<WorkspaceCall> calls() {
  std::vector<WorkspaceCall> c;
  const auto add = [&](CaseSpec spec, Layout layout, DType dtype, bool document_aware,
                       Strategy strategy = {}) {
    spec.dtype = dtype;
    RingRun run{4, layout, spec.layout};
    run.dtype = dtype;
    run.document_aware = document_aware;
    run.strategy = strategy;
    c.push_back({spec, run});
  };
  add(spec_of(MaskKind::kCausal, {1, 301, 301, 4, 2, 32, 16}, PositionKind::kContiguous, 0.1f, 61),
      Layout::kZigzag, DType::kF32, true);
  add(spec_of(MaskKind::kNone, {2, 7, 7, 2, 1, 8, 8}, PositionKind::kContiguous, 0.0f, 62),
      Layout::kContiguous, DType::kF32, false);
  add(spec_of(MaskKind::kDocsCausal, {1, 513, 513, 4, 4, 40, 24}, PositionKind::kContiguous, 0.1f,
              63),
      Layout::kStriped, DType::kBF16, true);
  add(spec_of(MaskKind::kWindow, {1, 97, 97, 2, 2, 16, 16}, PositionKind::kContiguous, 0.0f, 64),
      Layout::kContiguous, DType::kF32, true, Strategy::hybrid(2, 2));
  add(spec_of(MaskKind::kCausal, {1, 301, 301, 4, 2, 32, 16}, PositionKind::kContiguous, 0.1f, 61),
      Layout::kZigzag, DType::kF32, true, Strategy::ulysses());
  add(spec_of(MaskKind::kDocs, {2, 97, 97, 4, 1, 24, 8}, PositionKind::kContiguous, 0.1f, 66),
      Layout::kStriped, DType::kF32, true, Strategy::allgather());
  add(spec_of(MaskKind::kCausal, {1, 7, 7, 4, 4, 8, 8}, PositionKind::kContiguous, 0.0f, 67),
      Layout::kContiguous, DType::kF32, true, Strategy::ulysses());
  add(spec_of(MaskKind::kCausal, {1, 301, 301, 4, 2, 32, 16}, PositionKind::kContiguous, 0.1f, 61),
      Layout::kZigzag, DType::kF32, true);
  return c;
}

TEST(AttentionWorkspace, BorrowedBuffersGiveBitwiseTheResultsOfFreshOnes) {
  std::vector<AttentionWorkspace> workspaces(4);
  int64_t largest = 0;
  for (const WorkspaceCall& call : calls()) {
    const reference::Problem p = reference::make_problem(call.spec);
    const reference::Outputs fresh = run_ring(p, call.run);
    RingRun borrowed = call.run;
    borrowed.workspaces = workspaces;
    const reference::Outputs again = run_ring(p, borrowed);
    EXPECT_TRUE(outputs_bitwise_equal(fresh, again)) << reference::case_name(call.spec);
    int64_t bytes = 0;
    for (const AttentionWorkspace& w : workspaces) bytes += w.bytes();
    EXPECT_GE(bytes, largest) << "a workspace shrank";
    EXPECT_GT(bytes, 0);
    largest = bytes;
  }
}

// The buffers are charged to the workspace's counter, not to the call's rank counter, and are
// freed by release().
TEST(AttentionWorkspace, ChargedToItsCounterUntilRelease) {
  const CaseSpec spec =
      spec_of(MaskKind::kCausal, {1, 257, 257, 4, 2, 32, 32}, PositionKind::kContiguous, 0.0f, 65);
  const reference::Problem p = reference::make_problem(spec);
  const std::array<std::shared_ptr<MemoryCounter>, 2> counters{MemoryCounter::create(),
                                                               MemoryCounter::create()};
  std::array<AttentionWorkspace, 2> workspaces{AttentionWorkspace(counters[0].get()),
                                               AttentionWorkspace(counters[1].get())};
  RingRun run{2, Layout::kZigzag, spec.layout};
  run.workspaces = workspaces;
  run_ring(p, run);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(workspaces[static_cast<size_t>(r)].bytes(), 0);
    EXPECT_EQ(counters[static_cast<size_t>(r)]->stats().live_bytes,
              workspaces[static_cast<size_t>(r)].bytes());
    workspaces[static_cast<size_t>(r)].release();
    EXPECT_EQ(workspaces[static_cast<size_t>(r)].bytes(), 0);
    EXPECT_EQ(counters[static_cast<size_t>(r)]->stats().live_bytes, 0);
  }
}

// One call at a time: a second lease (a concurrent call) and release() during a call throw,
// naming the workspace; after the call a new lease works.
TEST(AttentionWorkspace, ASecondConcurrentCallIsRefused) {
  AttentionWorkspace workspace;
  MemoryCounter& mem = process_memory();
  {
    detail::WorkspaceLease lease(&workspace, &mem);
    EXPECT_EQ(lease.get(detail::WorkspaceBuffer::kRelay0, 100).size(), 100u);
    try {
      detail::WorkspaceLease second(&workspace, &mem);
      ADD_FAILURE() << "a second lease was granted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), ::testing::HasSubstr("CpOptions::workspace is in use"));
    }
    EXPECT_THROW(workspace.release(), Error);
    EXPECT_EQ(lease.get(detail::WorkspaceBuffer::kRelay0, 50).size(),
              50u);  // no shrink, no realloc
  }
  detail::WorkspaceLease after(&workspace, &mem);
  EXPECT_EQ(after.get(detail::WorkspaceBuffer::kHome, 0).size(), 0u);
  EXPECT_EQ(workspace.bytes(), 100 * static_cast<int64_t>(sizeof(float)));
}

}  // namespace
}  // namespace cpattn::testing
