// Cooperative cancellation: an in-process rank busy computing (a long kernel call, a ring step)
// stops within one work item once another rank of its group failed, so run_ranks returns with
// the error instead of waiting for the computation; a rank stuck past the deadline is caught by
// its peers' timeouts the same way.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <optional>
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

// A single-threaded kernel forward of ~10 s or more on any machine this project runs on (S =
// 32768, 8 heads, D = 128, full mask: 4.4e12 flops), whose work items take milliseconds.
struct LongKernel {
  static constexpr int64_t kS = 32768;
  Tensor q{{1, kS, 8, 128}}, out{{1, kS, 8, 128}};
  std::vector<int64_t> pos = std::vector<int64_t>(kS);
  std::vector<float> lse = std::vector<float>(8 * kS);
  LongKernel() { std::iota(pos.begin(), pos.end(), int64_t{0}); }
  void run(const Communicator& comm) {
    KernelOptions options(1);
    options.interruption_point = [&comm] { comm.throw_if_group_failed(); };
    const ConstView v = q.view();
    attention_kernel_forward({v, v, v, pos, pos, {}, {}}, {}, {}, out.view(), lse, options);
  }
};

TEST(Cancellation, AFailingRankStopsAPeerInsideAKernelCall) {
  LongKernel work;
  std::atomic<int> stopped{0};
  const Stopwatch watch;
  EXPECT_THROW(run_ranks(2,
                         [&](Communicator& comm) {
                           if (comm.rank() == 0) {
                             std::this_thread::sleep_for(std::chrono::milliseconds(200));
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
  // A work item takes up to about 3 s under the sanitizers (4 q tiles x 32768 keys), the whole
  // call 10 s or more in a release build and minutes under the sanitizers.
  EXPECT_LT(watch.seconds(), 6.0) << "the busy rank stopped within a work item or two";
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
                       codes[static_cast<size_t>(comm.rank())] = e.code();
                       throw;
                     }
                   },
                   options),
               Error);
  EXPECT_EQ(codes[0], ErrorCode::kTimeout) << "rank 0 waited for rank 1 until the deadline";
  EXPECT_EQ(codes[1], ErrorCode::kPeerFailed) << "rank 1 was stopped inside its computation";
  EXPECT_LT(watch.seconds(), 1.0 + 6.0);  // the deadline, then a work item or two
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

// A caller's stop request (a signal handler's flag) reaches the same interruption points: a
// long ring call on every rank stops within a work item with kInterrupted. (The detail tier:
// the checked one first hashes q, k and v for the fingerprint, which has no interruption point
// and takes seconds under a sanitizer at this size.)
TEST(Cancellation, AStopRequestEndsALongCallOnEveryRank) {
  const int64_t S = 8192;  // 2 ranks x 4096 queries x 8192 keys, 8 heads, D 128: about a second
  Tensor x({1, S, 8, 128});
  std::atomic<bool> stop{false};
  std::vector<ErrorCode> codes(2, ErrorCode::kInternal);
  std::atomic<bool> computing{false};
  std::optional<Stopwatch> since_stop;  // set by the signaller, read after it is joined
  std::thread signaller([&] {
    for (int i = 0; i < 60000 && !computing.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // inside the kernel by now
    since_stop.emplace();
    stop.store(true);
  });
  EXPECT_THROW(run_ranks(2,
                         [&](Communicator& comm) {
                           const auto seq =
                               SequenceSharding::of(Layout::kZigzag, S, 2, comm.rank());
                           const Tensor xr = shard_tensor(x.view(), seq, comm.rank());
                           CpOptions options;
                           options.stop_requested = &stop;
                           computing.store(true);
                           try {
                             detail::ring_attention_forward(comm, xr.view(), xr.view(), xr.view(),
                                                            seq, seq, {}, {}, options);
                           } catch (const Error& e) {
                             codes[static_cast<size_t>(comm.rank())] = e.code();
                             throw;
                           }
                         }),
               Error);
  signaller.join();
  ASSERT_TRUE(since_stop.has_value());
  EXPECT_LT(since_stop->seconds(), 3.0) << "the ranks stopped within a work item of the request";
  for (const ErrorCode code : codes)
    EXPECT_TRUE(code == ErrorCode::kInterrupted || code == ErrorCode::kPeerFailed)
        << error_code_name(code);
  EXPECT_TRUE(codes[0] == ErrorCode::kInterrupted || codes[1] == ErrorCode::kInterrupted);
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
