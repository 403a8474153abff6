// Collectives built from point-to-point messages on a channel kept apart from user tags. Both
// backends use them, so allreduce_sum is the same fixed-order sum (and bits) on either.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "cpattn/communicator.h"

namespace cpattn::detail {

/// The point-to-point primitives a collective needs. send/recv must use a channel that user
/// isend/irecv can never match (an internal tag or a duplicated MPI communicator).
struct CollectiveChannel {
  int rank = 0;
  int size = 1;
  MemoryCounter* memory = nullptr;  ///< charged for scratch buffers
  std::function<Request(std::span<const std::byte>, int dest)> send;
  std::function<Request(std::span<std::byte>, int src)> recv;
};

/// Element range [begin, end) of `n` owned by `rank` of `size` in reduce-scatter: n*r/P ..
/// n*(r+1)/P, so slices differ by at most one element.
struct Slice {
  size_t begin;
  size_t end;
};
Slice slice_of(size_t n, int rank, int size);

/// In-place elementwise sum over all ranks. Computes: data[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ...
/// in rank order, by the slice's owner only (reduce-scatter), then copied to every rank
/// (allgather): bitwise identical on all ranks and run to run. T is float or double.
template <typename T>
void allreduce_sum(const CollectiveChannel& ch, std::span<T> data);

/// Block i of `send` goes to rank i, block j of `recv` comes from rank j.
/// Throws Error(kShapeMismatch) if the sizes differ or are not divisible by the group size.
void all_to_all(const CollectiveChannel& ch, std::span<const std::byte> send,
                std::span<std::byte> recv);

/// Dissemination barrier (Hensgen, Finkel, Manber 1988): ceil(log2 P) rounds of empty messages;
/// round k signals rank + 2^k and waits for rank - 2^k.
void barrier(const CollectiveChannel& ch);

/// Rethrows the Error being handled with "<operation>: " in front of its message.
[[noreturn]] void rethrow_with_context(const char* operation);

}  // namespace cpattn::detail
