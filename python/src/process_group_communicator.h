// A cpattn Communicator over a torch.distributed ProcessGroup (c10d; gloo on CPU), so the one C++
// ring runs across PyTorch processes. Point-to-point messages are ProcessGroup send/recv with the
// caller's tags; collectives are cpattn's fixed-order ones (backend.h) on a reserved tag,
// so every rank gets bitwise the same sums as with the other backends.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "cpattn/backend.h"
#include "cpattn/communicator.h"

namespace cpattn::torch_binding {

/// Tags below this are the caller's; kCollectiveTag itself carries the collectives' messages.
inline constexpr int kCollectiveTag = 1 << 30;
/// A sub-group (split) sends over the same ProcessGroup in a tag namespace of its own: namespace
/// n >= 1 is the wire tags kCollectiveTag + n * kSubGroupTags + [0, kSubGroupTags), the
/// caller's tags below kSubGroupTags / 2 and the collectives' at kSubGroupTags / 2, for
/// n < kSubGroupNamespaces (the wire tag stays below 2^31).
inline constexpr int kSubGroupTags = 1 << 21;
inline constexpr int kSubGroupNamespaces = (1 << 30) / kSubGroupTags;

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

  // The Communicator hooks (communicator.h).
 protected:
  int do_rank() const override { return rank_; }
  int do_size() const override { return size_; }
  /// tag must be in [0, kCollectiveTag).
  Request do_isend(std::span<const std::byte> data, int dest, int tag) override;
  Request do_irecv(std::span<std::byte> data, int src, int tag) override;
  void do_allreduce_sum(std::span<float> data) override;
  void do_allreduce_sum(std::span<double> data) override;
  void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void do_barrier() override;
  /// A sub-group over the same ProcessGroup (no new ProcessGroup is made): its ranks are the
  /// members' ProcessGroup ranks, its messages travel in a tag namespace of its own, numbered
  /// 1 + (this communicator's split count) * do_size() + (the members' lowest rank here), so
  /// sub-groups never match each other's or this group's messages. Collective (communicator.h).
  /// Throws Error(kInvalidArgument) for a split of a sub-group (one level only: the hybrid
  /// strategy's rows and columns) and past kSubGroupNamespaces namespaces.
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  MemoryCounter& do_memory() override;

 private:
  // A sub-group: `members` are its ProcessGroup ranks, in its rank order.
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                           std::chrono::milliseconds timeout, std::vector<int> members, int rank,
                           int tag_namespace);
  Request post(bool is_send, std::byte* data, size_t bytes, int peer, int tag);
  // The ProcessGroup's tag for this communicator's `tag` (kCollective: the collectives').
  int wire_tag(int tag) const;
  int max_tag() const;  // the callers' tags are [0, max_tag())
  // "rank R" for a rank here; in a sub-group also its ProcessGroup rank, which names the process.
  std::string label(int rank) const;
  backend::CollectiveChannel channel();

  static constexpr int kCollective = -1;

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_, size_;
  std::vector<int> members_;  // ProcessGroup rank of each rank here
  int tag_namespace_ = 0;     // 0: the ProcessGroup's own
  int splits_ = 0;
};

}  // namespace cpattn::torch_binding
