// A cpattn Communicator over a torch.distributed ProcessGroup (c10d; gloo on CPU), so the one C++
// ring runs across PyTorch processes. Point-to-point messages are ProcessGroup send/recv with the
// caller's tags; collectives are cpattn's fixed-order ones (p2p_collectives.h) on a reserved tag,
// so every rank gets bitwise the same sums as with the other backends.
#pragma once

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "cpattn/communicator.h"
#include "cpattn/p2p_collectives.h"

namespace cpattn::torch_binding {

/// Tags below this are the caller's; kCollectiveTag itself carries the collectives' messages.
inline constexpr int kCollectiveTag = 1 << 30;

/// Rank pg->getRank() of the group. Every wait has this communicator's deadline (set_timeout):
/// on expiry Error(kTimeout) names this rank, the peer, the tag and the size; a peer that closed
/// its connection (exited, crashed) gives Error(kPeerFailed); other transport errors
/// Error(kCommunication). A receive must be posted with the exact size of its message (the ring
/// and the collectives always do). Charges allocations to process_memory() (one rank per
/// process). Thread-compatible like every Communicator.
class ProcessGroupCommunicator final : public Communicator {
 public:
  /// Throws Error(kInvalidArgument) for a null group.
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                           std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  using Communicator::all_to_all;
  using Communicator::irecv;
  using Communicator::isend;
  /// tag must be in [0, kCollectiveTag).
  Request isend(std::span<const std::byte> data, int dest, int tag) override;
  Request irecv(std::span<std::byte> data, int src, int tag) override;
  void allreduce_sum(std::span<float> data) override;
  void allreduce_sum(std::span<double> data) override;
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void barrier() override;
  MemoryCounter& memory() override;

 private:
  Request post(bool is_send, std::byte* data, size_t bytes, int peer, int tag);
  p2p::CollectiveChannel channel();

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_, size_;
};

}  // namespace cpattn::torch_binding
