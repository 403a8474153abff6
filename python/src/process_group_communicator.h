// A cpattn Communicator over a torch.distributed ProcessGroup (c10d; gloo on CPU), so the one C++
// ring runs across PyTorch processes. Point-to-point messages are ProcessGroup send/recv pairs
// (the wire protocol below); collectives are cpattn's fixed-order ones (backend.h) on a reserved
// tag, so every rank gets bitwise the same sums as with the other backends.
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
inline constexpr int kCollectiveTag = 1 << 29;
/// A sub-group (split) sends over the same ProcessGroup in a tag namespace of its own: namespace
/// n >= 1 is the channels kCollectiveTag + n * kSubGroupTags + [0, kSubGroupTags), the caller's
/// tags below kSubGroupTags / 2 and the collectives' at kSubGroupTags / 2, for
/// n < kSubGroupNamespaces (every channel stays below 2^30).
inline constexpr int kSubGroupTags = 1 << 20;
inline constexpr int kSubGroupNamespaces = (1 << 29) / kSubGroupTags;
/// A message's payload travels on its channel + kPayloadTag (below 2^31, the ProcessGroup's
/// largest tag); its header on the channel itself.
inline constexpr int kPayloadTag = 1 << 30;
/// A channel no message uses (between the collectives' and the first sub-group's): the receive
/// that closes the group's connections after a timeout (ProcessGroupCommunicator, Progress).
inline constexpr int kCloseChannel = kCollectiveTag + 1;

class Transport;

/// Rank pg->getRank() of the group. Thread-compatible like every Communicator; charges
/// allocations (the scratch of a discarded message) to process_memory() (one rank per process).
///
/// Wire protocol. A message of n bytes from (communicator) tag t is two ProcessGroup messages on
/// channel c (t's place in the tag namespace above): an 8-byte header holding n (little-endian)
/// on ProcessGroup tag c, then, when n > 0, the n payload bytes on tag c + kPayloadTag; a
/// zero-byte message is its header alone. isend posts both at once. irecv posts the header's
/// receive at once, so headers match receives in posting order; the payload's receive is posted
/// once the header has come, with the header's size (gloo ends the process when a message is
/// larger than its receive, and does not say how much came), by then for the earlier receives of
/// the same (source, tag) too, in the same order, so payloads match their headers. A message
/// larger than the receive buffer is received into scratch (charged to process_memory()) and the
/// receive fails with Error(kCommunication) naming both sizes; the next message of that source
/// and tag is unaffected. Messages of a process to itself never reach gloo (it has no connection
/// to its own rank): they are matched in the process, in posting order, and copied once.
///
/// Progress. Completion is only observable through a blocking wait on a c10d Work (gloo's
/// isCompleted() is false until a wait returned, and a wait that times out closes every
/// connection of the group), so helper threads, one per (direction, peer, channel) with posted
/// transfers, wait on the Works in posting order and post each payload receive when its header
/// has come. A receive thus completes whether or not anyone waits on it (a rank may wait on its
/// sends before its receives, as the contract allows), test() is exact, and the caller's waits
/// are condition-variable waits on this communicator's deadline (set_timeout). On expiry
/// Error(kTimeout) names this rank, the peer, the tag and the size, and the group's connections
/// are closed, as gloo's own timeouts close them (a 1 ms gloo wait on kCloseChannel): this
/// process's other operations fail at once, and its peers' operations with it fail at once with
/// Error(kPeerFailed) instead of each waiting for its own deadline; the ProcessGroup is not
/// usable afterwards. A peer that closed its connection (exited, crashed, timed out) gives
/// Error(kPeerFailed); other transport errors Error(kCommunication).
///
/// Cancellation (Request destroyed during unwinding or after a failed wait). A posted gloo
/// operation cannot be withdrawn, only abandoned. A receive whose header has not come stays
/// posted: when its message comes it is received into scratch and discarded, so the next
/// receive of that source and tag gets the message after it. A transfer under way (a payload
/// whose header came) gets 100 ms to finish; after that, and for a send its receiver never
/// matched, its Works are aborted and released, so the caller's buffer is never touched again
/// (a message that still arrives for an abandoned gloo buffer stalls that connection, as it does
/// for any abandoned gloo operation).
class ProcessGroupCommunicator final : public Communicator {
 public:
  /// Throws Error(kInvalidArgument) for a null group.
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group,
                           std::chrono::milliseconds timeout);
  ~ProcessGroupCommunicator() override;

  // The Communicator hooks (communicator.h).
 protected:
  int do_rank() const override { return rank_; }
  int do_size() const override { return size_; }
  /// tag must be in [0, kCollectiveTag) (a sub-group's: [0, kSubGroupTags / 2)).
  Request do_isend(std::span<const std::byte> data, int dest, int tag) override;
  Request do_irecv(std::span<std::byte> data, int src, int tag) override;
  void do_allreduce_sum(std::span<float> data) override;
  void do_allreduce_sum(std::span<double> data) override;
  void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void do_barrier() override;
  /// A sub-group over the same ProcessGroup (no new ProcessGroup is made): its ranks are the
  /// members' ProcessGroup ranks, its messages travel in a tag namespace of its own, so
  /// sub-groups never match each other's or their parents' messages; sub-groups split again
  /// (any depth). The namespace: after the (color, key) exchange every rank tells the others the
  /// lowest namespace it has not used yet (an all_to_all of this group), and a sub-group takes
  /// the largest of its members', so two communicators that share a process never share a
  /// namespace. Collective (communicator.h). Throws Error(kInvalidArgument) on the ranks of a
  /// sub-group past kSubGroupNamespaces namespaces.
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  MemoryCounter& do_memory() override;

 private:
  // A sub-group: `members` are its ProcessGroup ranks, in its rank order.
  ProcessGroupCommunicator(std::shared_ptr<Transport> transport, std::chrono::milliseconds timeout,
                           std::vector<int> members, int rank, int tag_namespace);
  Request post(bool is_send, std::byte* data, size_t bytes, int peer, int tag);
  // The channel (header wire tag) of this communicator's `tag` (kCollective: the collectives').
  int channel(int tag) const;
  int max_tag() const;  // the callers' tags are [0, max_tag())
  // "rank R" for a rank here; in a sub-group also its ProcessGroup rank, which names the process.
  std::string label(int rank) const;
  backend::CollectiveChannel collective_channel();

  static constexpr int kCollective = -1;

  std::shared_ptr<Transport> transport_;  // shared by a group and its sub-groups
  int rank_, size_;
  std::vector<int> members_;  // ProcessGroup rank of each rank here
  int tag_namespace_ = 0;     // 0: the ProcessGroup's own
};

}  // namespace cpattn::torch_binding
