// AttentionWorkspace: caller-owned buffers that every CP strategy's calls borrow instead of
// allocating (CpOptions::workspace, cpattn/cp_options.h; docs/design.md section 9).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"

namespace cpattn {

namespace detail {
class WorkspaceLease;
}

/// Reusable buffers for the calls of every CP strategy, owned by the caller
/// (CpOptions::workspace). A call borrows from here what it
/// would otherwise allocate and free: the ring its travelling k/v blocks, dk/dv accumulators and
/// finished dk/dv (5 k/v blocks of the largest rank: 320 MiB per rank at S = 16384, P = 2,
/// Hkv = 8, D = 128 in fp32; with direct blocks also the packed own block and the returned dk/dv
/// shares), Ulysses and the hybrid their head-side q, k, v, dout, out, lse, D and gradients,
/// allgather its gathered k/v and their dk/dv, and those three the staging of their
/// all-to-alls. The results a call returns
/// (out, lse, dq, dk, dv) are never in the workspace. Without a workspace every call gets fresh
/// memory, which the operating system faults in and zeroes page by page (docs/performance.md,
/// "Ring"); with one kept per rank across layers and steps, only the first call does. The
/// buffers grow to the largest call and are kept until release() or destruction. It is not a
/// cache: no result or state lives here, every call writes a buffer before it reads it, and the
/// contents between calls are meaningless. One call at a time: a call that finds the workspace in
/// use by another throws Error(kInvalidArgument). Its bytes are charged to the MemoryCounter given
/// at construction (process_memory() if null) from allocation until release.
class AttentionWorkspace {
 public:
  explicit AttentionWorkspace(MemoryCounter* counter = nullptr) : counter_(counter) {}
  AttentionWorkspace(const AttentionWorkspace&) = delete;
  AttentionWorkspace& operator=(const AttentionWorkspace&) = delete;

  /// Bytes held now. Read it between calls (not concurrently with one, which may grow a buffer).
  int64_t bytes() const noexcept;
  /// Frees every buffer. Throws Error(kInvalidArgument) while a call uses the workspace; a call
  /// that starts while release() runs throws the same "in use" error.
  void release();

 private:
  friend class detail::WorkspaceLease;
  MemoryCounter* counter_;
  /// One slot per detail::WorkspaceBuffer (sized by the first lease; empty until then).
  std::vector<Tensor> buffers_;
  std::atomic<bool> in_use_{false};
};

}  // namespace cpattn
