// Communicator decorators for ring tests: one counts the point-to-point traffic of a rank, the
// other makes a rank fail at a chosen send (fault injection).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn::testing {

/// Forwards everything to `inner`, counting isend/irecv calls and bytes, collectives and
/// interruption points (throw_if_group_failed calls).
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {
    set_timeout(inner.timeout());
  }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  using Communicator::irecv;
  using Communicator::isend;
  Request isend(std::span<const std::byte> data, int dest, int tag) override {
    before_send();
    ++sends;
    bytes_sent += static_cast<int64_t>(data.size());
    return inner_.isend(data, dest, tag);
  }
  Request irecv(std::span<std::byte> data, int src, int tag) override {
    ++recvs;
    return inner_.irecv(data, src, tag);
  }
  void allreduce_sum(std::span<float> data) override {
    ++collectives;
    inner_.allreduce_sum(data);
  }
  void allreduce_sum(std::span<double> data) override {
    ++collectives;
    inner_.allreduce_sum(data);
  }
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override {
    ++collectives;
    inner_.all_to_all(send, recv);
  }
  void barrier() override {
    ++collectives;
    inner_.barrier();
  }
  /// Forwarded (counted as a collective); the sub-group's own traffic is not counted.
  std::unique_ptr<Communicator> split(int color, int key) override {
    ++collectives;
    return inner_.split(color, key);
  }
  void throw_if_group_failed() const override {
    ++interruption_points;
    inner_.throw_if_group_failed();
  }
  MemoryCounter& memory() override { return inner_.memory(); }

  int64_t sends = 0, recvs = 0, collectives = 0, bytes_sent = 0;
  mutable std::atomic<int64_t> interruption_points{0};  // kernel workers call it concurrently

 protected:
  virtual void before_send() {}

 private:
  Communicator& inner_;
};

/// A rank that throws Error(kInternal, "injected failure ...") at its `fail_at`-th isend (0-based).
class FailingCommunicator : public CountingCommunicator {
 public:
  FailingCommunicator(Communicator& inner, int64_t fail_at)
      : CountingCommunicator(inner), fail_at_(fail_at) {}

 protected:
  void before_send() override {
    if (sends == fail_at_) {
      throw Error(ErrorCode::kInternal,
                  detail::str_cat("injected failure at send ", sends, " of rank ", rank()));
    }
  }

 private:
  int64_t fail_at_;
};

}  // namespace cpattn::testing
