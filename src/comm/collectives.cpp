// Point-to-point collectives of every Communicator backend (backend.h).
#include <cstring>
#include <memory>
#include <vector>

#include "cpattn/backend.h"
#include "cpattn/error.h"

namespace cpattn::backend {

namespace {

// Scratch array charged to a rank's MemoryCounter for its lifetime.
template <typename T>
class CountedScratch {
 public:
  CountedScratch(size_t n, MemoryCounter* counter)
      : data_(std::make_unique_for_overwrite<T[]>(n)),
        counter_(counter),
        bytes_(static_cast<int64_t>(n * sizeof(T))) {
    if (counter_ != nullptr) counter_->add_bytes(bytes_);
  }
  CountedScratch(const CountedScratch&) = delete;
  CountedScratch& operator=(const CountedScratch&) = delete;
  ~CountedScratch() {
    if (counter_ != nullptr) counter_->add_bytes(-bytes_);
  }
  T* data() { return data_.get(); }

 private:
  std::unique_ptr<T[]> data_;
  MemoryCounter* counter_;
  int64_t bytes_;
};

// A posted send or receive and the exact number of bytes it must move: a peer that called the
// collective with another length is caught on the receiving side even when its message fits.
struct Pending {
  Request request;
  size_t bytes;
};

// Waits on every operation in order; the first failure propagates and the destructors of the
// rest cancel (the stack is unwinding).
void wait_all(std::vector<Pending>& ops) {
  for (Pending& op : ops) {
    const size_t got = op.request.wait();
    CPATTN_CHECK(got == op.bytes, ErrorCode::kCommunication, "a message of ", got,
                 " bytes arrived where ", op.bytes,
                 " were expected (did the ranks pass buffers of different lengths?)");
  }
}

Pending post_recv(const CollectiveChannel& ch, std::span<std::byte> buffer, int src) {
  return {ch.recv(buffer, src), buffer.size()};
}
Pending post_send(const CollectiveChannel& ch, std::span<const std::byte> buffer, int dest) {
  return {ch.send(buffer, dest), buffer.size()};
}

// Element range [begin, end) of `n` owned by `rank` of `size` in reduce-scatter: n*r/P ..
// n*(r+1)/P, so slices differ by at most one element.
struct Slice {
  size_t begin;
  size_t end;
};
Slice slice_of(size_t n, int rank, int size) {
  const auto p = static_cast<size_t>(size);
  const auto r = static_cast<size_t>(rank);
  return {n * r / p, n * (r + 1) / p};
}

// Rethrows the Error being handled with "<operation>: " in front of its message.
[[noreturn]] void rethrow_with_context(const char* operation) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), detail::str_cat(operation, ": ", e.what()));
  }
}

template <typename T>
void allreduce_sum_impl(const CollectiveChannel& ch, std::span<T> data) {
  const int p = ch.size;
  if (p == 1) return;
  const size_t n = data.size();
  const Slice mine = slice_of(n, ch.rank, p);
  const size_t len = mine.end - mine.begin;
  try {
    // Reduce-scatter. Scratch layout: P slots of `len` elements; slot j holds rank j's values of
    // this rank's slice (slot `rank` stays unused: our own values are read from `data`).
    CountedScratch<T> scratch(len * static_cast<size_t>(p), ch.memory);
    std::vector<Pending> requests;
    requests.reserve(2 * static_cast<size_t>(p));
    for (int j = 0; j < p; ++j) {
      if (j == ch.rank) continue;
      requests.push_back(
          post_recv(ch, std::as_writable_bytes(std::span<T>(scratch.data() + len * j, len)), j));
    }
    for (int j = 0; j < p; ++j) {
      if (j == ch.rank) continue;
      const Slice s = slice_of(n, j, p);
      requests.push_back(post_send(ch, std::as_bytes(data.subspan(s.begin, s.end - s.begin)), j));
    }
    wait_all(requests);
    requests.clear();

    // Fixed rank order: acc = x_0, acc += x_1, ... Accumulate in slot 0 unless we are rank 0,
    // whose values live in `data` (then slot 0 is free and receives a copy first).
    auto values = [&](int j) -> const T* {
      return j == ch.rank ? data.data() + mine.begin : scratch.data() + len * j;
    };
    T* acc = scratch.data();
    if (ch.rank == 0 && len > 0) std::memcpy(acc, values(0), len * sizeof(T));
    for (int j = 1; j < p; ++j) {
      const T* x = values(j);
      for (size_t i = 0; i < len; ++i) acc[i] += x[i];
    }
    if (len > 0) std::memcpy(data.data() + mine.begin, acc, len * sizeof(T));

    // Allgather: every owner's finished slice straight into place.
    for (int j = 0; j < p; ++j) {
      if (j == ch.rank) continue;
      const Slice s = slice_of(n, j, p);
      requests.push_back(
          post_recv(ch, std::as_writable_bytes(data.subspan(s.begin, s.end - s.begin)), j));
    }
    for (int j = 0; j < p; ++j) {
      if (j == ch.rank) continue;
      requests.push_back(post_send(ch, std::as_bytes(data.subspan(mine.begin, len)), j));
    }
    wait_all(requests);
  } catch (const Error&) {
    rethrow_with_context("allreduce_sum");
  }
}

}  // namespace

void allreduce_sum(const CollectiveChannel& ch, std::span<float> data) {
  allreduce_sum_impl(ch, data);
}
void allreduce_sum(const CollectiveChannel& ch, std::span<double> data) {
  allreduce_sum_impl(ch, data);
}

void all_to_all(const CollectiveChannel& ch, std::span<const std::byte> send,
                std::span<std::byte> recv) {
  const auto p = static_cast<size_t>(ch.size);
  CPATTN_CHECK_EQ(recv.size(), send.size(), ErrorCode::kShapeMismatch,
                  "all_to_all: recv size in bytes (must equal the send size)");
  CPATTN_CHECK(send.size() % p == 0, ErrorCode::kShapeMismatch, "all_to_all: send size ",
               send.size(), " bytes is not divisible by the group size ", p);
  const size_t block = send.size() / p;
  const auto me = static_cast<size_t>(ch.rank);
  try {
    std::vector<Pending> requests;
    requests.reserve(2 * p);
    for (size_t j = 0; j < p; ++j) {
      if (j != me)
        requests.push_back(post_recv(ch, recv.subspan(j * block, block), static_cast<int>(j)));
    }
    for (size_t j = 0; j < p; ++j) {
      if (j != me)
        requests.push_back(post_send(ch, send.subspan(j * block, block), static_cast<int>(j)));
    }
    if (block > 0) std::memcpy(recv.data() + me * block, send.data() + me * block, block);
    wait_all(requests);
  } catch (const Error&) {
    rethrow_with_context("all_to_all");
  }
}

void barrier(const CollectiveChannel& ch) {
  const int p = ch.size;
  try {
    for (int k = 1; k < p; k *= 2) {
      Request in = ch.recv({}, (ch.rank - k + p) % p);
      Request out = ch.send({}, (ch.rank + k) % p);
      in.wait();
      out.wait();
    }
  } catch (const Error&) {
    rethrow_with_context("barrier");
  }
}

}  // namespace cpattn::backend
