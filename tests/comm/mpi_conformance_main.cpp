// The conformance suite under mpirun (registered for 1..4 processes in tests.cmake), plus the
// MPI-only checks: timeouts, chunked messages and errors as cpattn::Error. Every process runs
// every test; rank 0 prints the GoogleTest report, other ranks print only their failures.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/conformance.h"
#include "cpattn/error.h"
#include "cpattn/mpi_communicator.h"
#include "support/mpi_gtest_main.h"

namespace cpattn::testing {
namespace {

// The communicator every test uses (collective construction happens once, in main).
MpiCommunicator* g_comm = nullptr;

class MpiConformance : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(MpiConformance, Run) {
  // Keep ranks in lockstep between cases so a failure in one cannot leak into the next.
  GetParam().run(*g_comm);
  g_comm->barrier();
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiConformance, ::testing::ValuesIn(conformance_cases()),
                         [](const ::testing::TestParamInfo<ConformanceCase>& p) {
                           return p.param.name;
                         });

TEST(MpiCommunicator, SilentPeerTimesOutNamingRankPeerTagBytes) {
  Communicator& comm = *g_comm;
  const auto saved = comm.timeout();
  comm.set_timeout(std::chrono::milliseconds(200));
  std::vector<std::byte> buf(24);
  const int peer = (comm.rank() + 1) % comm.size();
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.irecv(std::span<std::byte>(buf), peer, 4242).wait();
    ADD_FAILURE() << "a receive nobody sends did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    const std::string expected = detail::str_cat(
        "rank ", comm.rank(), ": timed out after 0.2 s waiting for irecv from rank ", peer,
        " (tag 4242, buffer of 24 bytes)");
    EXPECT_EQ(std::string(e.what()), expected);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
  comm.set_timeout(saved);
  comm.barrier();
}

TEST(MpiCommunicator, ChunkedMessagesOfAnySizeArriveWhole) {
  // chunk_bytes 1000: 0, 999, 1000 (a full chunk plus an empty one) and 4500 bytes.
  MpiOptions options;
  options.chunk_bytes = 1000;
  MpiCommunicator comm(MPI_COMM_WORLD, options);
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  for (size_t n : {size_t{0}, size_t{999}, size_t{1000}, size_t{4500}}) {
    const auto out = message_bytes(comm.rank(), next, 1, n);
    std::vector<std::byte> in(n + 1000);  // capacity beyond the message must not matter
    Request r = comm.irecv(std::span<std::byte>(in), prev, 1);
    Request s = comm.isend(std::span<const std::byte>(out), next, 1);
    EXPECT_EQ(r.wait(), n);
    EXPECT_EQ(s.wait(), n);
    in.resize(n);
    EXPECT_EQ(in, message_bytes(prev, comm.rank(), 1, n)) << n << " bytes";
  }
  // A chunked message larger than the buffer is still an error.
  const auto out = message_bytes(comm.rank(), next, 2, 2500);
  std::vector<std::byte> in(1500);
  Request r = comm.irecv(std::span<std::byte>(in), prev, 2);
  Request s = comm.isend(std::span<const std::byte>(out), next, 2);
  EXPECT_THROW(r.wait(), Error);
  s.wait();
  comm.barrier();
}

// A rendezvous message (far above the eager limit) completes while its receiver only calls
// progress(): rank 0's send finishes before rank 1 waits on the receive (progress matches it and
// lets MPI copy it), with two more threads calling progress() concurrently on rank 1.
TEST(MpiCommunicator, ProgressMovesAPostedMessageWithoutAWait) {
  Communicator& comm = *g_comm;
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  constexpr size_t kBytes = size_t{8} << 20;
  constexpr int kData = 77, kDone = 78;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  if (comm.rank() == 0) {
    const auto out = message_bytes(0, 1, kData, kBytes);
    Request send = comm.isend(std::span<const std::byte>(out), 1, kData);
    bool sent = false;
    while (!sent && std::chrono::steady_clock::now() < deadline) sent = send.test();
    EXPECT_TRUE(sent) << "rank 1 called only progress(), and the send did not finish in 10 s";
    const std::byte flag{static_cast<unsigned char>(sent ? 1 : 0)};
    comm.isend(std::span<const std::byte>(&flag, 1), 1, kDone).wait();
    send.wait();
  } else if (comm.rank() == 1) {
    std::vector<std::byte> in(kBytes);
    std::byte flag{0};
    Request recv = comm.irecv(std::span<std::byte>(in), 0, kData);
    Request done = comm.irecv(std::span<std::byte>(&flag, 1), 0, kDone);
    std::atomic<bool> stop{false};
    std::vector<std::thread> helpers;
    for (int t = 0; t < 2; ++t) {
      helpers.emplace_back([&] {
        while (!stop.load()) comm.progress();
      });
    }
    // done.test() only advances the kDone queue: the data message moves by progress() alone.
    bool finished = false;
    while (!finished && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(5)) {
      comm.progress();
      finished = done.test();
    }
    stop.store(true);
    for (std::thread& t : helpers) t.join();
    ASSERT_TRUE(finished) << "rank 0 never reported";
    EXPECT_EQ(flag, std::byte{1});
    EXPECT_EQ(recv.wait(), kBytes);
    EXPECT_EQ(in, message_bytes(0, 1, kData, kBytes));
  }
  comm.barrier();
}

// A receive that times out part-way through a chunked message is cancelled; the rest of that
// message must be discarded by the next receive on the same (source, tag), not taken as its
// message. Without single-copy shared memory (the registration with
// btl_vader_single_copy_mechanism=none) a rendezvous chunk stays in flight while its sender
// computes, so the first chunk is matched and the cancel happens mid-message every time.
TEST(MpiCommunicator, AReceiveCancelledMidMessageLeavesNoTailForTheNext) {
  if (g_comm->size() < 2) GTEST_SKIP() << "needs two ranks";
  MpiOptions options;
  options.chunk_bytes = size_t{1} << 20;  // above the eager limits: every chunk is a rendezvous
  MpiCommunicator comm(MPI_COMM_WORLD, options);
  constexpr int kTag = 5;
  constexpr size_t kFirst = (size_t{3} << 20) + 5, kSecond = 100;  // 4 chunks, then 1
  const auto first = message_bytes(0, 1, kTag, kFirst);
  const auto second = message_bytes(0, 1, kTag + 1, kSecond);
  if (comm.rank() == 0) {
    Request a = comm.isend(std::span<const std::byte>(first), 1, kTag);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // computing: no MPI calls
    a.wait();
    comm.isend(std::span<const std::byte>(second), 1, kTag).wait();
  } else if (comm.rank() == 1) {
    std::vector<std::byte> in(size_t{4} << 20);
    comm.set_timeout(std::chrono::milliseconds(100));
    {
      Request a = comm.irecv(std::span<std::byte>(in), 0, kTag);
      // The sender sleeps for 500 ms. With single-copy shared memory the receiver may take the
      // whole message meanwhile; without it the wait must time out mid-message.
      bool timed_out = false;
      try {
        a.wait();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
        timed_out = true;
      }
      const char* single_copy = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
      if (single_copy != nullptr && std::string(single_copy) == "none") {
        EXPECT_TRUE(timed_out);
      }
    }  // cancelled after its wait failed
    comm.set_timeout(std::chrono::seconds(20));
    std::fill(in.begin(), in.end(), std::byte{0});
    Request b = comm.irecv(std::span<std::byte>(in), 0, kTag);
    ASSERT_EQ(b.wait(), kSecond) << "the next receive took the cancelled message's tail";
    EXPECT_TRUE(std::equal(second.begin(), second.end(), in.begin()));
  }
  comm.barrier();
}

TEST(MpiCommunicator, ArgumentsAreChecked) {
  Communicator& comm = *g_comm;
  std::vector<int> v(4);
  EXPECT_THROW(comm.irecv(std::span<int>(v), comm.size(), 0).wait(), Error);
  EXPECT_THROW(comm.isend(std::span<const int>(v), 0, -3).wait(), Error);
  std::vector<std::byte> send(static_cast<size_t>(comm.size()) * 3);
  std::vector<std::byte> recv(send.size() + static_cast<size_t>(comm.size()));
  EXPECT_THROW(comm.all_to_all(std::span<const std::byte>(send), std::span<std::byte>(recv)),
               Error);
  if (comm.size() > 1) {
    std::vector<std::byte> odd(static_cast<size_t>(comm.size()) * 3 + 1);
    EXPECT_THROW(comm.all_to_all(std::span<const std::byte>(odd), std::span<std::byte>(odd)),
                 Error);
  }
}

}  // namespace
}  // namespace cpattn::testing

int main(int argc, char** argv) {
  // A bug fails the job after the timeout instead of hanging it.
  return cpattn::testing::mpi_gtest_main(
      argc, argv, std::chrono::seconds(30),
      [](cpattn::MpiCommunicator& comm) { cpattn::testing::g_comm = &comm; });
}
