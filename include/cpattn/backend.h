// What an implementer of a Communicator backend needs besides communicator.h (docs/design.md
// section 7; docs/communicators.md): collectives built from point-to-point messages (a backend
// supplies send/recv on a channel its users' tags can never match, and gets allreduce_sum,
// all_to_all and barrier with the contract's semantics) and the backend-independent half of
// Communicator::split. Every
// backend of cpattn (in-process ranks, OpenMPI, torch.distributed) uses these, so allreduce_sum is
// the same fixed-order sum, with the same bits, on all of them.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cpattn/communicator.h"

namespace cpattn::backend {

/// The point-to-point primitives a collective needs. send/recv must use a channel that user
/// isend/irecv can never match (an internal tag or a duplicated MPI communicator), and their
/// Requests must honour the Communicator contract (deadlines, peer failure).
struct CollectiveChannel {
  int rank = 0;
  int size = 1;
  MemoryCounter* memory = nullptr;  ///< charged for scratch buffers (may be null)
  std::function<Request(std::span<const std::byte>, int dest)> send;
  std::function<Request(std::span<std::byte>, int src)> recv;
};

/// In-place elementwise sum over all ranks. Computes: data[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ...
/// in rank order, by the owner of element i's slice only (reduce-scatter: rank r owns elements
/// [n r / P, n (r + 1) / P)), then copied to every rank (allgather): bitwise identical on all ranks
/// and run to run. Throws Error(kCommunication) naming both sizes when a peer's message has
/// another length (ranks passed different n), and the channel's errors prefixed "allreduce_sum: ".
void allreduce_sum(const CollectiveChannel& ch, std::span<float> data);
void allreduce_sum(const CollectiveChannel& ch, std::span<double> data);

/// Block i of `send` goes to rank i, block j of `recv` comes from rank j. Throws
/// Error(kShapeMismatch) if the sizes differ or are not divisible by the group size.
void all_to_all(const CollectiveChannel& ch, std::span<const std::byte> send,
                std::span<std::byte> recv);

/// Dissemination barrier (Hensgen, Finkel, Manber 1988): ceil(log2 P) rounds of empty messages;
/// round k signals rank + 2^k and waits for rank - 2^k.
void barrier(const CollectiveChannel& ch);

/// This rank's sub-group of a split: the parent ranks of its color in the new order (by key,
/// then parent rank) and its rank among them.
struct SplitGroup {
  std::vector<int> members;
  int rank = 0;
};

/// How a backend names rank `rank` of a communicator in its errors: "rank 3" for one that no
/// split made; "rank 1 of a sub-group (group rank 3)" for a sub-communicator of split() (the
/// hybrid strategy's rows and columns), group_rank being that rank in the communicator the
/// splits started from, which `group` names ("group", "process group"), so that an error names
/// the thread or process it is about.
std::string rank_label(int rank, std::optional<int> group_rank, std::string_view group = "group");

/// Collective over `parent`: exchanges (color, key) with every rank and returns this rank's
/// sub-group. Throws Error(kInvalidArgument) on every rank when any rank passed color < 0
/// (naming the ranks), and the parent's communication errors.
SplitGroup plan_split(Communicator& parent, int color, int key);

}  // namespace cpattn::backend
