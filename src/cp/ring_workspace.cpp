// RingWorkspace (cpattn/ring.h) and the per-call lease on ring buffers (ring_detail.h).
#include <utility>

#include "cp/ring_detail.h"
#include "cpattn/error.h"

namespace cpattn {

int64_t RingWorkspace::bytes() const noexcept {
  int64_t total = 0;
  for (const Tensor& t : buffers_) total += t.numel() * static_cast<int64_t>(sizeof(float));
  return total;
}

void RingWorkspace::release() {
  CPATTN_CHECK(!in_use_.load(), ErrorCode::kInvalidArgument,
               "RingWorkspace::release: a ring call is using the workspace");
  for (Tensor& t : buffers_) t = Tensor();
}

namespace detail {

RingBuffers::RingBuffers(RingWorkspace* workspace, MemoryCounter* mem)
    : workspace_(workspace), mem_(mem) {
  if (workspace_ == nullptr) return;
  CPATTN_CHECK(!workspace_->in_use_.exchange(true), ErrorCode::kInvalidArgument,
               "RingOptions::workspace is in use by another ring call (one call at a time: give "
               "each rank and each concurrent call its own RingWorkspace)");
}

RingBuffers::~RingBuffers() {
  if (workspace_ != nullptr) workspace_->in_use_.store(false);
}

std::span<float> RingBuffers::get(RingBuffer which, int64_t floats) {
  if (floats == 0) return {};
  const auto i = static_cast<size_t>(which);
  Tensor& t = workspace_ != nullptr ? workspace_->buffers_[i] : own_[i];
  if (t.numel() < floats) {
    t = Tensor();  // free the smaller buffer first: peak memory stays the larger one
    t = Tensor({floats}, workspace_ != nullptr ? workspace_->counter_ : mem_);
  }
  return t.span().first(static_cast<size_t>(floats));
}

}  // namespace detail
}  // namespace cpattn
