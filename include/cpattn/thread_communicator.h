// In-process ranks: P threads of the calling process form a group (docs/design.md section 7), the
// embedded default backend for tests, laptops and single-host runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/memory.h"

namespace cpattn {

namespace detail {
class ThreadGroup;
}  // namespace detail
namespace backend {
struct CollectiveChannel;
}  // namespace backend

/// Options of run_ranks.
struct RunRanksOptions {
  /// Deadline of every wait of every rank (Communicator::set_timeout can change it per rank;
  /// run_ranks throws Error(kInvalidArgument) for one it refuses).
  std::chrono::milliseconds timeout = kDefaultCommTimeout;
};

/// One in-process rank. Created by run_ranks; messages are matched per (source, destination,
/// tag) in posting order and copied once, straight from the sender's buffer into the receiver's
/// (rendezvous: an isend completes when its irecv has been posted and the copy is done).
class ThreadCommunicator final : public Communicator {
 public:
  /// Rank `rank` of `group`; the group must outlive this object.
  ThreadCommunicator(detail::ThreadGroup& group, int rank);
  ~ThreadCommunicator() override;

  // The Communicator hooks (communicator.h).
 protected:
  int do_rank() const override { return rank_; }
  int do_size() const override;
  /// A sub-group over the same ThreadGroup (communicator.h): its messages live in a context of
  /// their own, its ranks keep this rank's MemoryCounter, and errors name ranks as the
  /// sub-group numbers them. The ThreadGroup (run_ranks) must outlive it.
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  Request do_isend(std::span<const std::byte> data, int dest, int tag) override;
  Request do_irecv(std::span<std::byte> data, int src, int tag) override;
  void do_allreduce_sum(std::span<float> data) override;
  void do_allreduce_sum(std::span<double> data) override;
  void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void do_barrier() override;
  void do_throw_if_group_failed() const override;
  /// This rank's own counter, a child of process_memory(). It stays valid for as long as anything
  /// charged to it lives (results kept after run_ranks returned), even past this object.
  MemoryCounter& do_memory() override { return *memory_; }

 private:
  // A member of a sub-group: `members` are the group ranks of the sub-group, in its order.
  ThreadCommunicator(detail::ThreadGroup& group, uint64_t context, std::vector<int> members,
                     int rank, std::shared_ptr<MemoryCounter> memory);
  Request post(bool is_send, const std::byte* message, std::byte* buffer, size_t bytes, int peer,
               int tag);
  int group_rank(int rank) const;  // this communicator's rank -> ThreadGroup rank
  // This communicator's rank `rank` in errors: backend::rank_label (with its group rank in a
  // sub-group).
  std::string label(int rank) const;
  backend::CollectiveChannel channel();  // collectives' messages on the internal tag

  detail::ThreadGroup& group_;
  uint64_t context_ = 0;      // 0: the root group of run_ranks
  std::vector<int> members_;  // group rank of each rank; empty: the identity (root group)
  int rank_;
  uint64_t splits_ = 0;                    // split() calls so far (equal on every rank)
  std::shared_ptr<MemoryCounter> memory_;  // shared with everything charged to this rank
};

/// A CP group of one rank in the calling thread (cp_size = 1): single-device attention through the
/// same API as a CP group, e.g. attention_forward(SingleRankCommunicator{}, ...). Messages to
/// itself work like those of any in-process rank; collectives are the identity. Its counter is a
/// child of process_memory().
class SingleRankCommunicator final : public Communicator {
 public:
  SingleRankCommunicator();
  ~SingleRankCommunicator() override;

  // The Communicator hooks (communicator.h).
 protected:
  int do_rank() const override { return 0; }
  int do_size() const override { return 1; }
  Request do_isend(std::span<const std::byte> data, int dest, int tag) override;
  Request do_irecv(std::span<std::byte> data, int src, int tag) override;
  void do_allreduce_sum(std::span<float> data) override;
  void do_allreduce_sum(std::span<double> data) override;
  void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void do_barrier() override;
  void do_throw_if_group_failed() const override { rank_->throw_if_group_failed(); }
  /// A group of one again (every color makes a group of this rank alone); must not outlive this
  /// object.
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  MemoryCounter& do_memory() override;

 private:
  std::unique_ptr<detail::ThreadGroup> group_;
  std::unique_ptr<ThreadCommunicator> rank_;
};

/// Runs fn(comm) for every rank of a group of `size` in-process ranks, each on its own thread,
/// and returns when all have finished.
/// Failure: when a rank throws, every wait on a message to or from it (pending or future) throws
/// at once Error(kPeerFailed) naming that rank and its message, so its failure reaches every rank
/// that depends on it, rank by rank, while exchanges between healthy ranks complete; all threads
/// are joined and the first failing rank's exception is rethrown here (its original type). A rank
/// that returns while another still waits for it makes that wait throw Error(kPeerFailed) "rank r
/// exited while ...". Throws Error(kInvalidArgument) if size < 1.
void run_ranks(int size, const std::function<void(Communicator&)>& fn,
               const RunRanksOptions& options = {});

}  // namespace cpattn
