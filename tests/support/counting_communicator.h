// Communicator decorators for ring tests: one counts the point-to-point traffic of a rank, the
// other makes a rank fail at a chosen send (fault injection), in its sub-groups too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn::testing {

/// Forwards everything to `inner`, counting isend/irecv calls and bytes, collectives,
/// interruption points (throw_if_group_failed calls) and progress calls.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {
    set_timeout(inner.timeout());
  }

  // The Communicator hooks (communicator.h).
 protected:
  int do_rank() const override { return inner_.rank(); }
  int do_size() const override { return inner_.size(); }
  Request do_isend(std::span<const std::byte> data, int dest, int tag) override {
    before_send();
    ++sends;
    bytes_sent += static_cast<int64_t>(data.size());
    return inner_.isend(data, dest, tag);
  }
  Request do_irecv(std::span<std::byte> data, int src, int tag) override {
    ++recvs;
    return inner_.irecv(data, src, tag);
  }
  void do_allreduce_sum(std::span<float> data) override {
    ++collectives;
    inner_.allreduce_sum(data);
  }
  void do_allreduce_sum(std::span<double> data) override {
    ++collectives;
    inner_.allreduce_sum(data);
  }
  void do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) override {
    ++collectives;
    inner_.all_to_all(send, recv);
  }
  void do_barrier() override {
    ++collectives;
    inner_.barrier();
  }
  /// Forwarded (counted as a collective); the sub-group's own traffic is not counted.
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    ++collectives;
    return inner_.split(color, key);
  }
  void do_throw_if_group_failed() const override {
    ++interruption_points;
    inner_.throw_if_group_failed();
  }
  void do_progress() noexcept override {
    ++progress_calls;
    inner_.progress();
  }
  MemoryCounter& do_memory() override { return inner_.memory(); }

 public:
  int64_t sends = 0, recvs = 0, collectives = 0, bytes_sent = 0;
  mutable std::atomic<int64_t> interruption_points{0};  // kernel workers call it concurrently
  std::atomic<int64_t> progress_calls{0};               // likewise

 protected:
  virtual void before_send() {}

 private:
  Communicator& inner_;
};

namespace detail_testing {
/// Holds a sub-communicator for a decorator that must own what it forwards to (base-from-member:
/// initialised before the decorator's CountingCommunicator base).
struct OwnedCommunicator {
  std::unique_ptr<Communicator> owned;
};
}  // namespace detail_testing

/// A rank that throws Error(kInternal, "injected failure ...") at its `fail_at`-th isend (0-based),
/// counting the sends of the sub-communicators it splits off too (each wraps its sub-group alike
/// and shares the count), so strategies that talk in sub-groups (the hybrid's rows and columns)
/// fail at every one of their sends as well.
class FailingCommunicator : private detail_testing::OwnedCommunicator, public CountingCommunicator {
 public:
  FailingCommunicator(Communicator& inner, int64_t fail_at)
      : OwnedCommunicator{nullptr},
        CountingCommunicator(inner),
        fail_at_(fail_at),
        rank_sends_(std::make_shared<std::atomic<int64_t>>(0)) {}

  std::unique_ptr<Communicator> do_split(int color, int key) override {
    std::unique_ptr<Communicator> sub = CountingCommunicator::do_split(color, key);
    return std::unique_ptr<Communicator>(
        new FailingCommunicator(std::move(sub), fail_at_, rank_sends_));
  }

 protected:
  void before_send() override {
    const int64_t n = (*rank_sends_)++;
    if (n == fail_at_) {
      throw Error(ErrorCode::kInternal,
                  detail::str_cat("injected failure at send ", n, " of rank ", rank()));
    }
  }

 private:
  FailingCommunicator(std::unique_ptr<Communicator> sub, int64_t fail_at,
                      std::shared_ptr<std::atomic<int64_t>> rank_sends)
      : OwnedCommunicator{std::move(sub)},
        CountingCommunicator(*owned),
        fail_at_(fail_at),
        rank_sends_(std::move(rank_sends)) {}

  int64_t fail_at_;
  std::shared_ptr<std::atomic<int64_t>> rank_sends_;  // this rank's sends in every sub-group
};

}  // namespace cpattn::testing
