// Failure injection on in-process ranks: a throwing rank, a silent peer, an exited peer, a too
// small buffer; and the Request / run_ranks edge contracts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"

namespace cpattn::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::string what_of(const std::function<void()>& fn, ErrorCode* code = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (code != nullptr) *code = e.code();
    return e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Rank 2 of 4 throws at ring step 3 while the others are blocked in their step-3 waits (they
// never get rank 2's message). Everyone must be released well within a second of the throw.
TEST(ThreadFailure, ThrowingRankReleasesAllOthersFast) {
  constexpr int kRanks = 4;
  // A first thread makes ThreadSanitizer start its own background thread now, not inside the run.
  std::thread([] {}).join();
  const size_t threads_before = thread_count();
  const int64_t bytes_before = process_memory().stats().live_bytes;
  std::vector<std::string> errors(kRanks);
  std::vector<ErrorCode> codes(kRanks, ErrorCode::kInternal);
  std::atomic<int64_t> thrown_at{0};
  std::vector<int64_t> released_at(kRanks, 0);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(60);
  const std::string rethrown = what_of([&] {
    run_ranks(
        kRanks,
        [&](Communicator& comm) {
          const int next = (comm.rank() + 1) % kRanks;
          const int prev = (comm.rank() + kRanks - 1) % kRanks;
          std::vector<float> out(1000, static_cast<float>(comm.rank()));
          std::vector<float> in(1000);
          for (int step = 0; step < 10; ++step) {
            if (comm.rank() == 2 && step == 3) {
              std::this_thread::sleep_for(milliseconds(50));  // let the others block first
              thrown_at = Clock::now().time_since_epoch().count();
              throw std::runtime_error("injected failure in rank 2");
            }
            Request r = comm.irecv(std::span<float>(in), prev, step);
            Request s = comm.isend(std::span<const float>(out), next, step);
            try {
              r.wait();
              s.wait();
            } catch (const Error& e) {
              released_at[static_cast<size_t>(comm.rank())] =
                  Clock::now().time_since_epoch().count();
              errors[static_cast<size_t>(comm.rank())] = e.what();
              codes[static_cast<size_t>(comm.rank())] = e.code();
              throw;
            }
          }
        },
        options);
  });
  EXPECT_EQ(rethrown, "injected failure in rank 2");  // the root cause, not a consequence
  for (int r = 0; r < kRanks; ++r) {
    if (r == 2) continue;
    EXPECT_EQ(codes[static_cast<size_t>(r)], ErrorCode::kPeerFailed)
        << errors[static_cast<size_t>(r)];
    EXPECT_TRUE(
        contains(errors[static_cast<size_t>(r)], "rank 2 failed: injected failure in rank 2"))
        << errors[static_cast<size_t>(r)];
    const auto delay = Clock::duration(released_at[static_cast<size_t>(r)] - thrown_at.load());
    EXPECT_LT(delay, milliseconds(200)) << "rank " << r;
  }
  EXPECT_EQ(thread_count(), threads_before);
  EXPECT_EQ(process_memory().stats().live_bytes, bytes_before);
}

TEST(ThreadFailure, SilentPeerTimesOutNamingRankPeerTagBytes) {
  RunRanksOptions options;
  options.timeout = milliseconds(100);
  ErrorCode code = ErrorCode::kInternal;
  const auto start = Clock::now();
  const std::string what = what_of(
      [&] {
        run_ranks(
            2,
            [](Communicator& comm) {
              if (comm.rank() == 1) {
                // Stays alive (no "exited" shortcut) but never sends.
                std::this_thread::sleep_for(milliseconds(400));
                return;
              }
              std::vector<std::byte> buf(24);
              comm.irecv(std::span<std::byte>(buf), 1, 42).wait();
            },
            options);
      },
      &code);
  EXPECT_EQ(code, ErrorCode::kTimeout) << what;
  EXPECT_TRUE(contains(what, "rank 0: timed out after 0.1 s")) << what;
  EXPECT_TRUE(contains(what, "from rank 1 (tag 42, buffer of 24 bytes)")) << what;
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST(ThreadFailure, PeerThatReturnedIsReportedNotWaitedFor) {
  ErrorCode code = ErrorCode::kInternal;
  const auto start = Clock::now();
  const std::string what = what_of(
      [&] {
        run_ranks(3, [](Communicator& comm) {
          if (comm.rank() != 0) return;
          std::vector<std::byte> buf(8);
          comm.irecv(std::span<std::byte>(buf), 2, 3).wait();
        });  // default 300 s timeout: only the exit notice can end this quickly
      },
      &code);
  EXPECT_EQ(code, ErrorCode::kPeerFailed) << what;
  EXPECT_TRUE(contains(what, "rank 2 exited while rank 0 waits for its irecv from rank 2 (tag 3"))
      << what;
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST(ThreadFailure, SmallBufferIsAnErrorNamingBothSizes) {
  ErrorCode code = ErrorCode::kInternal;
  const std::string what = what_of(
      [&] {
        run_ranks(2, [](Communicator& comm) {
          std::vector<double> out(10);
          std::vector<double> in(4);
          Request r = comm.irecv(std::span<double>(in), 1 - comm.rank(), 0);
          Request s = comm.isend(std::span<const double>(out), 1 - comm.rank(), 0);
          s.wait();
          r.wait();
        });
      },
      &code);
  EXPECT_EQ(code, ErrorCode::kCommunication) << what;
  EXPECT_TRUE(contains(what, "is 80 bytes, larger than the receive buffer of 32 bytes")) << what;
}

TEST(ThreadFailure, CollectiveReleasedWhenARankThrows) {
  std::atomic<int> peer_failed{0};
  EXPECT_THROW(run_ranks(3,
                         [&](Communicator& comm) {
                           if (comm.rank() == 1)
                             throw Error(ErrorCode::kInvalidArgument, "bad input on rank 1");
                           std::vector<double> v(100, 1.0);
                           try {
                             comm.allreduce_sum(std::span<double>(v));
                           } catch (const Error& e) {
                             if (e.code() == ErrorCode::kPeerFailed &&
                                 contains(e.what(), "allreduce_sum: ") &&
                                 contains(e.what(), "bad input on rank 1")) {
                               ++peer_failed;
                             }
                             throw;
                           }
                         }),
               Error);
  EXPECT_EQ(peer_failed.load(), 2);
}

TEST(ThreadFailure, DroppedRequestDuringUnwindIsCancelled) {
  // Rank 0 posts an irecv nobody answers and then throws: unwinding must cancel it rather than
  // wait out the (long) timeout.
  const auto start = Clock::now();
  EXPECT_THROW(run_ranks(2,
                         [](Communicator& comm) {
                           if (comm.rank() == 1) return;
                           std::vector<std::byte> buf(16);
                           Request r = comm.irecv(std::span<std::byte>(buf), 0, 1);
                           throw std::logic_error("rank 0 gives up");
                         }),
               std::logic_error);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST(ThreadCommunicator, RequestContract) {
  run_ranks(1, [](Communicator& comm) {
    EXPECT_EQ(comm.rank(), 0);
    EXPECT_EQ(comm.size(), 1);
    Request empty;
    EXPECT_FALSE(empty.valid());
    EXPECT_THROW(empty.wait(), Error);
    std::vector<int> out{1, 2, 3};
    std::vector<int> in(3);
    Request r = comm.irecv(std::span<int>(in), 0, 0);
    EXPECT_FALSE(r.test());
    Request s = comm.isend(std::span<const int>(out), 0, 0);
    EXPECT_TRUE(r.test());
    EXPECT_EQ(r.wait(), 12u);
    EXPECT_EQ(r.wait(), 12u);  // idempotent
    EXPECT_EQ(s.wait(), 12u);
    EXPECT_EQ(in, out);
    EXPECT_THROW(comm.isend(std::span<const int>(out), 1, 0).wait(), Error);   // no rank 1
    EXPECT_THROW(comm.isend(std::span<const int>(out), 0, -1).wait(), Error);  // bad tag
  });
}

TEST(ThreadCommunicator, DroppedSendOnNormalPathWaitsForItsReceiver) {
  run_ranks(2, [](Communicator& comm) {
    std::vector<int> v(5, comm.rank() + 10);
    if (comm.rank() == 0) {
      { Request dropped = comm.isend(std::span<const int>(v), 1, 0); }
      comm.barrier();
    } else {
      std::this_thread::sleep_for(milliseconds(20));
      comm.irecv(std::span<int>(v), 0, 0).wait();
      EXPECT_EQ(v, std::vector<int>(5, 10));
      comm.barrier();
    }
  });
}

TEST(ThreadCommunicator, EveryRankHasItsOwnMemoryCounter) {
  std::vector<MemoryCounter*> counters(3);
  run_ranks(3, [&](Communicator& comm) {
    counters[static_cast<size_t>(comm.rank())] = &comm.memory();
    comm.memory().add_bytes(100);
    EXPECT_EQ(comm.memory().stats().live_bytes, 100);     // its own ranks' bytes only
    EXPECT_GE(process_memory().stats().live_bytes, 100);  // and counted in the process
    comm.barrier();
    comm.memory().add_bytes(-100);
  });
  EXPECT_NE(counters[0], counters[1]);
  EXPECT_NE(counters[1], counters[2]);
}

// Sub-groups of a 2 x 2 grid (rows {0,1}, {2,3}; columns {0,2}, {1,3}). Rank 0 throws; rank 1
// waits for it in their row, rank 3 for rank 1 in their column, rank 2 for rank 3 in their row:
// the failure travels across sub-groups and releases every rank at once, each error naming its
// peer as the sub-group numbers it.
TEST(ThreadFailure, FailureInOneSubGroupReleasesTheOthers) {
  constexpr int kRanks = 4;
  const auto row_label = [](int r) {
    return detail::str_cat("rank ", r % 2, " of a sub-group (group rank ", r, ")");
  };
  std::vector<std::string> errors(kRanks);
  std::vector<ErrorCode> codes(kRanks, ErrorCode::kInternal);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(60);
  const auto start = Clock::now();
  const std::string rethrown = what_of([&] {
    run_ranks(
        kRanks,
        [&](Communicator& comm) {
          const int r = comm.rank();
          std::unique_ptr<Communicator> row = comm.split(r / 2, r);
          std::unique_ptr<Communicator> column = comm.split(r % 2, r);
          std::vector<int> v(3);
          if (r == 0) throw std::runtime_error("rank 0 gives up");
          errors[static_cast<size_t>(r)] = what_of(
              [&] {
                if (r == 1) row->irecv(std::span<int>(v), 0, 5).wait();
                if (r == 3) column->irecv(std::span<int>(v), 0, 5).wait();
                if (r == 2) row->irecv(std::span<int>(v), 1, 5).wait();
              },
              &codes[static_cast<size_t>(r)]);
          // The failed rank is named in the whole group's numbering, this one both ways.
          const std::string stopped = what_of([&] { row->throw_if_group_failed(); });
          EXPECT_TRUE(contains(stopped, detail::str_cat(row_label(r),
                                                        ": stopped because group rank 0 failed: "
                                                        "rank 0 gives up")))
              << stopped;
          throw Error(ErrorCode::kPeerFailed, errors[static_cast<size_t>(r)]);
        },
        options);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(contains(rethrown, "rank 0 gives up")) << rethrown;
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_EQ(codes[static_cast<size_t>(r)], ErrorCode::kPeerFailed) << errors[r];
  }
  // Rank 1 is rank 1 of its row, waiting for row rank 0; rank 3 is rank 1 of its column, waiting
  // for column rank 0 (group rank 1). Each is named both ways.
  EXPECT_TRUE(contains(errors[1],
                       "rank 1 of a sub-group (group rank 1): irecv from rank 0 of a "
                       "sub-group (group rank 0) (tag 5"))
      << errors[1];
  EXPECT_TRUE(contains(errors[3],
                       "rank 1 of a sub-group (group rank 3): irecv from rank 0 of a "
                       "sub-group (group rank 1) (tag 5"))
      << errors[3];
  EXPECT_TRUE(contains(errors[2], "irecv from rank 1 of a sub-group (group rank 3) (tag 5"))
      << errors[2];
}

TEST(ThreadCommunicator, SplitOfOneRankAndItsContextsAreFreed) {
  SingleRankCommunicator one;
  std::unique_ptr<Communicator> sub = one.split(3, 0);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->rank(), 0);
  std::vector<double> x{1.5};
  sub->allreduce_sum(std::span<double>(x));
  EXPECT_EQ(x[0], 1.5);
  // Many short-lived splits (the hybrid strategy makes two per call), each with a working
  // context of its own.
  run_ranks(2, [](Communicator& comm) {
    for (int i = 0; i < 2000; ++i) {
      std::unique_ptr<Communicator> s = comm.split(i % 3, comm.rank());
      std::vector<double> v{1.0};
      s->allreduce_sum(std::span<double>(v));
      EXPECT_EQ(v[0], 2.0);
    }
  });
}

TEST(ThreadCommunicator, RunRanksRejectsEmptyGroup) {
  EXPECT_THROW(run_ranks(0, [](Communicator&) {}), Error);
}

// A deadline of 0, a negative one, or one past 1e6 s (milliseconds::max() overflowed the
// deadline's time point, so every wait timed out at once) is refused; 1 ms and 1e6 s are not.
TEST(ThreadCommunicator, ADeadlineOutsideItsRangeIsRefused) {
  for (const milliseconds bad :
       {milliseconds(0), milliseconds(-1000), milliseconds(1'000'000'001), milliseconds::max()}) {
    ErrorCode code = ErrorCode::kInternal;
    const std::string what = what_of([&] { run_ranks(1, [](Communicator&) {}, {bad}); }, &code);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << bad.count();
    EXPECT_TRUE(contains(what, "a deadline must be in [1, 1000000000] ms")) << what;
  }
  run_ranks(1, [](Communicator& comm) {
    comm.set_timeout(milliseconds(1));
    comm.set_timeout(milliseconds(1'000'000'000));
    EXPECT_EQ(comm.timeout(), milliseconds(1'000'000'000));
    EXPECT_THROW(comm.set_timeout(milliseconds::max()), Error);
    EXPECT_EQ(comm.timeout(), milliseconds(1'000'000'000));  // unchanged
  });
}

}  // namespace
}  // namespace cpattn::testing
