// AttentionWorkspace (cpattn/workspace.h) and the per-call lease on its buffers (workspace.h).
#include "cp/workspace_lease.h"

#include "cpattn/error.h"

namespace cpattn {

int64_t AttentionWorkspace::bytes() const noexcept {
  int64_t total = 0;
  for (const Tensor& t : buffers_) total += t.numel() * static_cast<int64_t>(sizeof(float));
  return total;
}

void AttentionWorkspace::release() {
  // Held like a call's lease while freeing, so no call can start on buffers being freed.
  CPATTN_CHECK(!in_use_.exchange(true), ErrorCode::kInvalidArgument,
               "AttentionWorkspace::release: a call is using the workspace");
  for (Tensor& t : buffers_) t = Tensor();
  in_use_.store(false);
}

namespace detail {

WorkspaceLease::WorkspaceLease(AttentionWorkspace* workspace, MemoryCounter* mem)
    : workspace_(workspace), mem_(mem) {
  if (workspace_ == nullptr) return;
  CPATTN_CHECK(!workspace_->in_use_.exchange(true), ErrorCode::kInvalidArgument,
               "CpOptions::workspace is in use by another call (one call at a time: give each "
               "rank and each concurrent call its own AttentionWorkspace)");
  workspace_->buffers_.resize(kWorkspaceBuffers);
}

WorkspaceLease::~WorkspaceLease() {
  if (workspace_ != nullptr) workspace_->in_use_.store(false);
}

std::span<float> WorkspaceLease::get(WorkspaceBuffer which, int64_t floats) {
  if (floats == 0) return {};
  const auto i = static_cast<size_t>(which);
  Tensor& t = workspace_ != nullptr ? workspace_->buffers_[i] : own_[i];
  if (t.numel() < floats) {
    t = Tensor();  // free the smaller buffer first: peak memory stays the larger one
    t = Tensor({floats}, workspace_ != nullptr ? workspace_->counter_ : mem_);
  }
  return t.span().first(static_cast<size_t>(floats));
}

View WorkspaceLease::view(WorkspaceBuffer which, const std::array<int64_t, 4>& shape) {
  const std::span<float> s = get(which, shape[0] * shape[1] * shape[2] * shape[3]);
  return {s.data(), shape, dense_strides(shape, MemoryLayout::kBSHD)};
}

void WorkspaceLease::done(std::initializer_list<WorkspaceBuffer> buffers) {
  if (workspace_ != nullptr) return;
  for (WorkspaceBuffer b : buffers) own_[static_cast<size_t>(b)] = Tensor();
}

}  // namespace detail
}  // namespace cpattn
