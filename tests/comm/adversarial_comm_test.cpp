// Adversarial probes of the in-process communicator: many ranks, self messages, empty messages,
// inconsistent collective sizes, bad peers and tags, very short deadlines, slow ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"
#include "support/errors.h"

namespace cpattn {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

ErrorCode code_of(const std::function<void()>& fn, std::string* what = nullptr) {
  const Error e = testing::error_of(fn);
  if (what != nullptr) *what = e.what();
  return e.code();
}

// 16 ranks (more than cores): allreduce is bitwise identical on every rank and exact for small
// integers, all_to_all routes every block, barrier and self messages work.
TEST(CommAdversarial, SixteenRanksCollectivesAndSelfMessages) {
  constexpr int kRanks = 16;
  std::vector<std::vector<float>> sums(kRanks);
  run_ranks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(37);  // not a multiple of 16: uneven slices, some of length 2 and 3
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r * 100 + i);
    comm.allreduce_sum(std::span<float>(x));
    sums[static_cast<size_t>(r)] = x;

    std::vector<int32_t> send(kRanks * 2), recv(kRanks * 2, -1);
    for (int j = 0; j < kRanks; ++j) send[2 * j] = send[2 * j + 1] = r * 1000 + j;
    comm.all_to_all(std::span<const int32_t>(send), std::span<int32_t>(recv));
    for (int j = 0; j < kRanks; ++j) {
      EXPECT_EQ(recv[2 * j], j * 1000 + r);
      EXPECT_EQ(recv[2 * j + 1], j * 1000 + r);
    }

    const std::vector<double> out{1.5, -2.5};
    std::vector<double> in(2);
    Request rr = comm.irecv(std::span<double>(in), r, 7);
    Request sr = comm.isend(std::span<const double>(out), r, 7);
    EXPECT_EQ(rr.wait(), 2 * sizeof(double));
    sr.wait();
    EXPECT_EQ(in, out);

    // Zero-byte messages and empty collectives are legal.
    Request e1 = comm.irecv(std::span<std::byte>(), (r + 1) % kRanks, 8);
    Request e2 = comm.isend(std::span<const std::byte>(), (r + kRanks - 1) % kRanks, 8);
    EXPECT_EQ(e1.wait(), 0u);
    e2.wait();
    comm.allreduce_sum(std::span<double>());
    comm.all_to_all(std::span<const std::byte>(), std::span<std::byte>());
    comm.barrier();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(sums[static_cast<size_t>(r)], sums[0]) << "rank " << r;
  }
  for (size_t i = 0; i < 37; ++i) EXPECT_EQ(sums[0][i], 100.0f * 120 + 16.0f * i);
}

// Ranks that disagree on an allreduce length must all get an error, never a hang, a crash or a
// silently wrong sum. With 10 floats on rank 0 and 11 on rank 1 every message rank 1 receives
// fits its buffer, so only the exact-size check of the collective catches it there.
TEST(CommAdversarial, AllreduceWithDisagreeingLengthsFailsOnEveryRank) {
  for (const int ranks : {2, 3, 5}) {
    RunRanksOptions options;
    options.timeout = std::chrono::seconds(20);
    std::vector<std::atomic<bool>> failed(static_cast<size_t>(ranks));
    const auto start = Clock::now();
    EXPECT_THROW(run_ranks(
                     ranks,
                     [&](Communicator& comm) {
                       std::vector<float> x(static_cast<size_t>(10 + (comm.rank() == 1)), 1.0f);
                       try {
                         comm.allreduce_sum(std::span<float>(x));
                       } catch (const Error&) {
                         failed[static_cast<size_t>(comm.rank())] = true;
                         throw;
                       }
                     },
                     options),
                 Error)
        << ranks << " ranks";
    for (int r = 0; r < ranks; ++r) {
      EXPECT_TRUE(failed[static_cast<size_t>(r)]) << "rank " << r << " of " << ranks;
    }
    EXPECT_LT(Clock::now() - start, milliseconds(5000));
  }
}

// The same with the rank holding the longer buffer receiving a message that is too short.
TEST(CommAdversarial, AllreduceShortMessageNamesTheSizes) {
  std::string rank1_error;
  EXPECT_THROW(run_ranks(2,
                         [&](Communicator& comm) {
                           std::vector<float> x(static_cast<size_t>(10 + comm.rank()), 1.0f);
                           try {
                             comm.allreduce_sum(std::span<float>(x));
                           } catch (const Error& e) {
                             if (comm.rank() == 1) rank1_error = e.what();
                             throw;
                           }
                         }),
               Error);
  EXPECT_NE(rank1_error.find("allreduce_sum: "), std::string::npos) << rank1_error;
  EXPECT_NE(rank1_error.find("20 bytes arrived where 24 were expected"), std::string::npos)
      << rank1_error;
}

TEST(CommAdversarial, BadPeersTagsAndSizesAreRejected) {
  run_ranks(2, [](Communicator& comm) {
    std::vector<std::byte> buf(8);
    const std::span<std::byte> b(buf);
    const std::span<const std::byte> cb(buf);
    std::string what;
    EXPECT_EQ(code_of([&] { (void)comm.isend(cb, 2, 0); }, &what), ErrorCode::kInvalidArgument);
    EXPECT_NE(what.find("[0, 2)"), std::string::npos) << what;
    EXPECT_EQ(code_of([&] { (void)comm.irecv(b, -1, 0); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(code_of([&] { (void)comm.isend(cb, 0, -5); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(code_of([&] { (void)comm.irecv(b, 0, INT_MIN); }), ErrorCode::kInvalidArgument);
    std::vector<std::byte> odd(3), odd_out(3);
    EXPECT_EQ(
        code_of([&] { comm.all_to_all(std::span<const std::byte>(odd), std::span(odd_out)); }),
        ErrorCode::kShapeMismatch);
    EXPECT_EQ(code_of([&] { comm.all_to_all(cb, std::span(odd_out)); }), ErrorCode::kShapeMismatch);
    Request empty;
    EXPECT_EQ(code_of([&] { empty.wait(); }), ErrorCode::kInvalidArgument);
    comm.barrier();  // both ranks are still healthy after rejected calls
  });
}

// A 1 ms deadline on a barrier that a slow rank joins 300 ms late: the waiting ranks time out
// with kTimeout (not a hang), and run_ranks returns long before the slow rank would matter.
TEST(CommAdversarial, TinyDeadlineWithASlowRankTimesOut) {
  RunRanksOptions options;
  options.timeout = milliseconds(1);
  std::atomic<int> timeouts{0};
  const auto start = Clock::now();
  EXPECT_THROW(run_ranks(
                   4,
                   [&](Communicator& comm) {
                     if (comm.rank() == 3) std::this_thread::sleep_for(milliseconds(300));
                     try {
                       comm.barrier();
                     } catch (const Error& e) {
                       if (e.code() == ErrorCode::kTimeout) ++timeouts;
                       throw;
                     }
                   },
                   options),
               Error);
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

// After a peer failed, every later call of the surviving ranks fails fast too (no 300 s wait).
TEST(CommAdversarial, CallsAfterAPeerFailureFailFast) {
  std::atomic<int> fast_failures{0};
  const auto start = Clock::now();
  EXPECT_THROW(run_ranks(3,
                         [&](Communicator& comm) {
                           if (comm.rank() == 0) throw Error(ErrorCode::kIo, "disk full on 0");
                           for (int i = 0; i < 3; ++i) {
                             try {
                               comm.barrier();
                             } catch (const Error& e) {
                               if (e.code() == ErrorCode::kPeerFailed) ++fast_failures;
                             }
                           }
                         }),
               Error);
  EXPECT_EQ(fast_failures.load(), 6);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

}  // namespace
}  // namespace cpattn
