// Cooperative cancellation: an in-process rank busy computing (a long kernel call, a ring step)
// stops within one work item once another rank of its group failed, so run_ranks returns with
// the error instead of waiting for the computation; a rank stuck past the deadline is caught by
// its peers' timeouts the same way. "Within a work item" is counted in interruption points
// reached after the event, not in seconds: a work item takes tenths of a second in a release
// build and seconds under the sanitizers on a loaded machine. That there is a point before every
// work item and ring step is TheRingHasInterruptionPointsAtEveryStepAndKernelItem's subject.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#include "support/counting_communicator.h"

namespace cpattn {
namespace {

// The interruption points a call may reach once the event that must stop it has happened: the
// work item in flight ends at one, which throws; the second and third allow for the thread that
// signals the event being descheduled between raising the flag and failing the group.
constexpr int64_t kMaxPointsAfterTheEvent = 3;

// A single-threaded kernel forward of ~10 s or more on any machine this project runs on (S =
// 32768, 8 heads, D = 128, full mask: 4.4e12 flops) in about 180 work items (8 q tiles of one
// head each: a few tenths of a second in a release build, seconds under the sanitizers), that
// counts the interruption points it reaches after `event` was set.
struct LongKernel {
  static constexpr int64_t kS = 32768;
  Tensor q{{1, kS, 8, 128}}, out{{1, kS, 8, 128}};
  std::vector<int64_t> pos = std::vector<int64_t>(kS);
  std::vector<float> lse = std::vector<float>(8 * kS);
  std::atomic<bool> event{false};
  std::atomic<int64_t> points_after_event{0};
  LongKernel() { std::iota(pos.begin(), pos.end(), int64_t{0}); }
  void run(const Communicator& comm) {
    KernelOptions options(1);
    options.interruption_point = [this, &comm] {
      const bool after_event = event.load();
      try {
        comm.throw_if_group_failed();
      } catch (const Error&) {
        ++points_after_event;  // the group fails after the event, maybe after the load above
        throw;
      }
      if (after_event) ++points_after_event;
    };
    const ConstView v = q.view();
    attention_kernel_forward({v, v, v, pos, pos, {}, {}}, {}, {}, out.view(), lse, options);
  }
};

TEST(Cancellation, AFailingRankStopsAPeerInsideAKernelCall) {
  LongKernel work;
  std::atomic<int> stopped{0};
  EXPECT_THROW(run_ranks(2,
                         [&](Communicator& comm) {
                           if (comm.rank() == 0) {
                             std::this_thread::sleep_for(std::chrono::milliseconds(200));
                             work.event.store(true);
                             throw Error(ErrorCode::kInvalidArgument, "rank 0 gives up");
                           }
                           try {
                             work.run(comm);
                           } catch (const Error& e) {
                             EXPECT_EQ(e.code(), ErrorCode::kPeerFailed);
                             EXPECT_NE(std::string(e.what()).find("rank 0 gives up"),
                                       std::string::npos);
                             ++stopped;
                             throw;
                           }
                         }),
               Error);
  EXPECT_EQ(stopped.load(), 1);
  EXPECT_GE(work.points_after_event.load(), 1) << "rank 1 stopped at an interruption point";
  EXPECT_LE(work.points_after_event.load(), kMaxPointsAfterTheEvent)
      << "the busy rank stopped within a few interruption points of its peer's failure";
}

TEST(Cancellation, ARankStuckInComputePastTheDeadlineIsReleased) {
  LongKernel work;
  RunRanksOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  std::vector<ErrorCode> codes(2, ErrorCode::kInternal);
  const Stopwatch watch;
  EXPECT_THROW(run_ranks(
                   2,
                   [&](Communicator& comm) {
                     try {
                       if (comm.rank() == 1) work.run(comm);  // busy far past the deadline
                       comm.barrier();
                     } catch (const Error& e) {
                       if (comm.rank() == 0) work.event.store(true);
                       codes[static_cast<size_t>(comm.rank())] = e.code();
                       throw;
                     }
                   },
                   options),
               Error);
  EXPECT_EQ(codes[0], ErrorCode::kTimeout) << "rank 0 waited for rank 1 until the deadline";
  EXPECT_GE(watch.seconds(), 1.0) << "not before the deadline";
  EXPECT_EQ(codes[1], ErrorCode::kPeerFailed) << "rank 1 was stopped inside its computation";
  EXPECT_GE(work.points_after_event.load(), 1) << "rank 1 stopped at an interruption point";
  EXPECT_LE(work.points_after_event.load(), kMaxPointsAfterTheEvent)
      << "rank 1 stopped within a few interruption points of rank 0's timeout";
}

// The ring checks at every step and inside every kernel call (between work items), where it
// also lets the communicator move posted transfers (progress).
TEST(Cancellation, TheRingHasInterruptionPointsAtEveryStepAndKernelItem) {
  const int64_t S = 1024;
  Tensor x({1, S, 2, 16});
  std::vector<int64_t> counts(4), progress(4);
  run_ranks(4, [&](Communicator& comm) {
    const auto seq = SequenceSharding::of(Layout::kZigzag, S, 4, comm.rank());
    const Tensor xr = shard_tensor(x.view(), seq, comm.rank(), &comm.memory());
    testing::CountingCommunicator counting(comm);
    const ForwardResult f =
        attention_forward(counting, xr.view(), xr.view(), xr.view(), seq, {}, {});
    counts[static_cast<size_t>(comm.rank())] = counting.interruption_points.load();
    progress[static_cast<size_t>(comm.rank())] = counting.progress_calls.load();
  });
  // 4 steps, each block 256 tokens: 2 q tiles x 1 kv head x 1 head chunk = 2 items per call.
  for (int64_t n : counts) EXPECT_GE(n, 4 + 4 * 2);
  for (int64_t n : progress) EXPECT_GE(n, 4 * 2);
}

// Counts the interruption points its rank passes (its cancellation check,
// throw_if_group_failed, runs after the stop check) once `stop` was set, and adds 1 to
// `ranks_inside` at the rank's first interruption point.
class StopWatchingCommunicator : public testing::CountingCommunicator {
 public:
  StopWatchingCommunicator(Communicator& inner, const std::atomic<bool>& stop,
                           std::atomic<int>& ranks_inside)
      : CountingCommunicator(inner), stop_(stop), ranks_inside_(ranks_inside) {}
  mutable std::atomic<int64_t> points_after_stop{0};

 protected:
  void do_throw_if_group_failed() const override {
    if (stop_.load()) ++points_after_stop;
    if (!inside_.exchange(true)) ++ranks_inside_;
    CountingCommunicator::do_throw_if_group_failed();
  }

 private:
  const std::atomic<bool>& stop_;
  std::atomic<int>& ranks_inside_;
  mutable std::atomic<bool> inside_{false};
};

// A caller's stop request (a signal handler's flag) reaches the same interruption points: a
// long ring call on every rank stops within a work item with kInterrupted. (The detail tier:
// the checked one first hashes q, k and v for the fingerprint, which has no interruption point
// and takes seconds under a sanitizer at this size.)
TEST(Cancellation, AStopRequestEndsALongCallOnEveryRank) {
  const int64_t S = 8192;  // 2 ranks x 4096 queries x 8192 keys, 8 heads, D 128: about a second
  Tensor x({1, S, 8, 128});
  std::atomic<bool> stop{false};
  std::vector<ErrorCode> codes(2, ErrorCode::kInternal);
  std::vector<int64_t> points_after_stop(2, -1);
  std::atomic<int> ranks_inside{0};
  std::thread signaller([&] {
    // Once both ranks are inside their call (at an interruption point), or after 60 s.
    for (int i = 0; i < 60000 && ranks_inside.load() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    stop.store(true);
  });
  EXPECT_THROW(run_ranks(2,
                         [&](Communicator& comm) {
                           const auto seq =
                               SequenceSharding::of(Layout::kZigzag, S, 2, comm.rank());
                           const Tensor xr = shard_tensor(x.view(), seq, comm.rank());
                           StopWatchingCommunicator watching(comm, stop, ranks_inside);
                           CpOptions options;
                           options.stop_requested = &stop;
                           const size_t r = static_cast<size_t>(comm.rank());
                           try {
                             detail::ring_attention_forward(watching, xr.view(), xr.view(),
                                                            xr.view(), seq, seq, {}, {}, options);
                           } catch (const Error& e) {
                             codes[r] = e.code();
                             points_after_stop[r] = watching.points_after_stop.load();
                             throw;
                           }
                         }),
               Error);
  signaller.join();
  for (const ErrorCode code : codes)
    EXPECT_TRUE(code == ErrorCode::kInterrupted || code == ErrorCode::kPeerFailed)
        << error_code_name(code);
  EXPECT_TRUE(codes[0] == ErrorCode::kInterrupted || codes[1] == ErrorCode::kInterrupted);
  for (const int64_t n : points_after_stop) {
    EXPECT_GE(n, 0) << "a rank finished its call";
    EXPECT_LE(n, kMaxPointsAfterTheEvent)
        << "a rank passed interruption points after the stop request";
  }
}

TEST(Cancellation, AStopRequestedBeforeTheCallStopsIt) {
  Tensor x({1, 64, 2, 16});
  const std::atomic<bool> stop{true};
  CpOptions options;
  options.stop_requested = &stop;
  try {
    throw_if_stop_requested(options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInterrupted);
    EXPECT_STREQ(e.what(), "stopped by request");
  }
  std::vector<ErrorCode> codes(2, ErrorCode::kInternal);
  EXPECT_THROW(run_ranks(2,
                         [&](Communicator& comm) {
                           const auto seq =
                               SequenceSharding::of(Layout::kZigzag, 64, 2, comm.rank());
                           const Tensor xr = shard_tensor(x.view(), seq, comm.rank());
                           try {
                             attention_forward(comm, xr.view(), xr.view(), xr.view(), seq, {}, {},
                                               CpOptions(options));
                           } catch (const Error& e) {
                             codes[static_cast<size_t>(comm.rank())] = e.code();
                             throw;
                           }
                         }),
               Error);
  for (const ErrorCode code : codes)
    EXPECT_TRUE(code == ErrorCode::kInterrupted || code == ErrorCode::kPeerFailed)
        << error_code_name(code);
  options.stop_requested = nullptr;
  EXPECT_NO_THROW(throw_if_stop_requested(options));
}

}  // namespace
}  // namespace cpattn
