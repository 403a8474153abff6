// A call's lease on the buffers of an AttentionWorkspace (cpattn/workspace.h): the ring's
// travelling buffers and the whole-sequence / head-side operands of the other strategies' local
// kernel calls, borrowed from the caller's workspace or, without one, allocated for the call.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"
#include "cpattn/workspace.h"

namespace cpattn::detail {

/// The buffers (AttentionWorkspace's slots). Ring: the two k/v relay buffers, the two dk/dv
/// accumulators, the finished dk/dv (home), and for a direct own block (RelayPlan) its packed
/// k/v and the dk/dv shares returned to it. Ulysses / hybrid (head side) and allgather
/// (gathered k/v and their dk/dv): the operands and results of the strategy's local call, and
/// the staging of their all-to-alls (what a rank sends and receives, packed).
enum class WorkspaceBuffer {
  kRelay0,
  kRelay1,
  kGrad0,
  kGrad1,
  kHome,
  kOwnKv,
  kShares,
  kQ,
  kK,
  kV,
  kDout,
  kOut,
  kLse,
  kDelta,
  kDq,
  kDk,
  kDv,
  kStageSend,
  kStageRecv,
};
/// The number of WorkspaceBuffer slots.
inline constexpr size_t kWorkspaceBuffers = static_cast<size_t>(WorkspaceBuffer::kStageRecv) + 1;
/// The call's lease on its buffers: with an AttentionWorkspace, that workspace's (marked in use
/// for the lease's lifetime, grown as needed, contents left from earlier calls); without one,
/// fresh zero-filled tensors charged to `mem`, freed by done() or with the lease. No caller may
/// rely on a buffer's contents before writing it. Declare the lease before anything that holds a
/// Request on its buffers, so those requests end (Request's destructor) first. One lease per
/// call: nested calls (the hybrid's ring) borrow through the outer call's lease.
class WorkspaceLease {
 public:
  /// Throws Error(kInvalidArgument) when the workspace is in use by another call.
  WorkspaceLease(AttentionWorkspace* workspace, MemoryCounter* mem);
  ~WorkspaceLease();
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  /// `which` with room for at least `floats` floats: its first `floats` (empty for 0).
  std::span<float> get(WorkspaceBuffer which, int64_t floats);
  /// `which` as a dense BSHD fp32 view of `shape` [B, S, H, D].
  View view(WorkspaceBuffer which, const std::array<int64_t, 4>& shape);
  /// The call no longer needs these: call-owned buffers are freed (a workspace keeps its own).
  void done(std::initializer_list<WorkspaceBuffer> buffers);

 private:
  AttentionWorkspace* workspace_;
  MemoryCounter* mem_;
  std::array<Tensor, kWorkspaceBuffers> own_;
};

}  // namespace cpattn::detail
