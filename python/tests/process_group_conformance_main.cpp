// The Communicator conformance suite (tests/comm/conformance.h) on ProcessGroupCommunicator, over
// a gloo ProcessGroup made in C++ from a c10d FileStore, plus the checks of this backend: a
// receive that completes while nobody waits on it, the message of a cancelled receive, an
// oversized message between two others, splits three deep, argument checks, and (run alone, as it
// closes the group) a deadline. One process per rank, started by run_ranks.sh (registered in
// tests.cmake): every process runs every test; rank 0 prints the GoogleTest report, the others
// only their failures.
//
// Usage: test_torch_communicator RANK SIZE STORE_FILE [GoogleTest flags]
// Without --gtest_filter every test but ProcessGroupDeadline.* runs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "comm/conformance.h"
#include "cpattn/error.h"
#include "cpattn/memory.h"
#include "process_group_communicator.h"
#include "support/rank_failure_printer.h"

namespace cpattn::testing {
namespace {

using torch_binding::ProcessGroupCommunicator;

// The communicator every test uses (made once, in main).
ProcessGroupCommunicator* g_comm = nullptr;

class ProcessGroupConformance : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(ProcessGroupConformance, Run) {
  if (g_comm->size() > GetParam().max_ranks) GTEST_SKIP() << "more ranks than the case allows";
  GetParam().run(*g_comm);
  // Keep ranks in lockstep between cases so a failure in one cannot leak into the next.
  g_comm->barrier();
}

INSTANTIATE_TEST_SUITE_P(ProcessGroup, ProcessGroupConformance,
                         ::testing::ValuesIn(conformance_cases()),
                         [](const ::testing::TestParamInfo<ConformanceCase>& p) {
                           return p.param.name;
                         });

int next_rank(const Communicator& c) { return (c.rank() + 1) % c.size(); }
int prev_rank(const Communicator& c) { return (c.rank() + c.size() - 1) % c.size(); }

// A wait past its deadline names rank, peer, tag and size, and closes the group's connections
// (as a gloo timeout does): this rank's next operation fails at once, and so do the peers' waits
// for this rank, long before their own deadlines. Run alone (the group is not usable after it):
// --gtest_filter=ProcessGroupDeadline.*
TEST(ProcessGroupDeadline, ATimeoutNamesTheWaitAndReleasesThePeersAtOnce) {
  Communicator& comm = *g_comm;
  std::vector<std::byte> buf(24);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
  if (comm.rank() == 0) {
    const int peer = next_rank(comm);
    comm.set_timeout(std::chrono::milliseconds(200));
    try {
      comm.irecv(std::span<std::byte>(buf), peer, 4242).wait();
      ADD_FAILURE() << "a receive nobody sends did not time out";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTimeout);
      EXPECT_EQ(std::string(e.what()),
                detail::str_cat("rank 0: timed out after 0.2 s waiting for irecv from rank ", peer,
                                " (tag 4242, 24-byte buffer)"));
    }
    EXPECT_LT(elapsed(), std::chrono::milliseconds(2000));
    if (comm.size() == 1) return;  // no connections to close
    comm.set_timeout(std::chrono::seconds(20));
    EXPECT_THROW(comm.barrier(), Error);
    EXPECT_LT(elapsed(), std::chrono::seconds(5)) << "the barrier after the timeout waited";
    return;
  }
  comm.set_timeout(std::chrono::seconds(20));
  try {
    comm.irecv(std::span<std::byte>(buf), 0, 4243).wait();
    ADD_FAILURE() << "a receive from rank 0, which timed out, completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailed) << e.what();
  }
  EXPECT_LT(elapsed(), std::chrono::seconds(5)) << "waited for its own deadline";
}

// Receives move without a wait (helper threads wait on gloo): test() turns true by itself.
TEST(ProcessGroupCommunicator, AReceiveCompletesWhileNobodyWaitsOnIt) {
  Communicator& comm = *g_comm;
  const auto out = message_bytes(comm.rank(), next_rank(comm), 11, 1000);
  std::vector<std::byte> in(1000);
  Request recv = comm.irecv(std::span<std::byte>(in), prev_rank(comm), 11);
  Request send = comm.isend(std::span<const std::byte>(out), next_rank(comm), 11);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool received = false, sent = false;
  while (!(received && sent) && std::chrono::steady_clock::now() < deadline) {
    received = received || recv.test();
    sent = sent || send.test();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(received) << "test() never saw the receive complete";
  EXPECT_TRUE(sent) << "test() never saw the send complete";
  EXPECT_EQ(recv.wait(), 1000u);
  EXPECT_EQ(send.wait(), 1000u);
  EXPECT_EQ(in, message_bytes(prev_rank(comm), comm.rank(), 11, 1000));
  comm.barrier();
}

// gloo cannot withdraw a posted receive: a receive cancelled before its message came takes that
// message when it comes (into scratch, released), and the next receive gets the one after it.
TEST(ProcessGroupCommunicator, ACancelledReceiveTakesTheMessageItWasPostedFor) {
  Communicator& comm = *g_comm;
  const int64_t live_before = process_memory().stats().live_bytes;
  std::vector<std::byte> in(100, std::byte{0xEE});
  try {
    Request early = comm.irecv(std::span<std::byte>(in), prev_rank(comm), 12);
    throw std::runtime_error("unwinding");  // destroyed while the stack unwinds: cancelled
  } catch (const std::runtime_error&) {
  }
  comm.barrier();  // every rank has cancelled before the messages go
  const auto first = message_bytes(comm.rank(), next_rank(comm), 12, 50);
  const auto second = message_bytes(comm.rank(), next_rank(comm), 13, 60);
  Request s1 = comm.isend(std::span<const std::byte>(first), next_rank(comm), 12);
  Request s2 = comm.isend(std::span<const std::byte>(second), next_rank(comm), 12);
  Request r = comm.irecv(std::span<std::byte>(in), prev_rank(comm), 12);
  EXPECT_EQ(r.wait(), 60u);
  EXPECT_EQ(s1.wait(), 50u);
  EXPECT_EQ(s2.wait(), 60u);
  const auto expected = message_bytes(prev_rank(comm), comm.rank(), 13, 60);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), in.begin()));
  EXPECT_EQ(in[60], std::byte{0xEE}) << "beyond the message";
  EXPECT_EQ(process_memory().stats().live_bytes, live_before) << "the scratch was not released";
  comm.barrier();
}

// A message larger than its buffer (also a buffer of 0 bytes) fails naming both sizes and leaves
// the messages after it, on the same tag, to their own receives.
TEST(ProcessGroupCommunicator, AnOversizedMessageIsDiscardedAndTheNextArrives) {
  Communicator& comm = *g_comm;
  const int64_t live_before = process_memory().stats().live_bytes;
  const int next = next_rank(comm), prev = prev_rank(comm);
  const auto big = message_bytes(comm.rank(), next, 21, 4097);
  const auto small = message_bytes(comm.rank(), next, 22, 5);
  const auto last = message_bytes(comm.rank(), next, 23, 40);
  std::vector<std::byte> in_big(57), in_last(57);
  Request r1 = comm.irecv(std::span<std::byte>(in_big), prev, 20);
  Request r2 = comm.irecv(std::span<std::byte>(), prev, 20);
  Request r3 = comm.irecv(std::span<std::byte>(in_last), prev, 20);
  Request s1 = comm.isend(std::span<const std::byte>(big), next, 20);
  Request s2 = comm.isend(std::span<const std::byte>(small), next, 20);
  Request s3 = comm.isend(std::span<const std::byte>(last), next, 20);
  EXPECT_EQ(r3.wait(), 40u);  // waited first: the two before it are driven in order anyway
  in_last.resize(40);
  EXPECT_EQ(in_last, message_bytes(prev, comm.rank(), 23, 40));
  for (auto [r, bytes, buffer] : {std::tuple{&r1, 4097, 57}, std::tuple{&r2, 5, 0}}) {
    try {
      r->wait();
      ADD_FAILURE() << "a " << bytes << "-byte message into a " << buffer << "-byte buffer";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCommunication);
      EXPECT_NE(std::string(e.what()).find(detail::str_cat(bytes,
                                                           " bytes, larger than the receive "
                                                           "buffer of ",
                                                           buffer, " bytes")),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(s1.wait(), 4097u);
  EXPECT_EQ(s2.wait(), 5u);
  EXPECT_EQ(s3.wait(), 40u);
  EXPECT_EQ(process_memory().stats().live_bytes, live_before) << "the scratch was not released";
  comm.barrier();
}

// Sub-groups of sub-groups (three levels, each the whole group) exchange messages with the same
// tag at the same time, receives posted innermost first: each gets its own.
TEST(ProcessGroupCommunicator, NestedSplitsKeepTheirMessagesApart) {
  Communicator& comm = *g_comm;
  std::vector<std::unique_ptr<Communicator>> levels;
  levels.push_back(comm.split(0, comm.rank()));
  levels.push_back(levels.back()->split(0, comm.rank()));
  levels.push_back(levels.back()->split(0, comm.rank()));
  std::vector<Communicator*> all{&comm};
  for (auto& l : levels) all.push_back(l.get());
  std::vector<std::vector<std::byte>> in(all.size(), std::vector<std::byte>(64)), out;
  std::vector<Request> recvs, sends;
  for (size_t i = all.size(); i-- > 0;) {
    recvs.push_back(all[i]->irecv(std::span<std::byte>(in[i]), prev_rank(*all[i]), 1));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    out.push_back(message_bytes(comm.rank(), static_cast<int>(i), 1, 64));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    sends.push_back(all[i]->isend(std::span<const std::byte>(out[i]), next_rank(*all[i]), 1));
  }
  for (Request& r : recvs) EXPECT_EQ(r.wait(), 64u);
  for (Request& s : sends) s.wait();
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(in[i], message_bytes(prev_rank(comm), static_cast<int>(i), 1, 64)) << "level " << i;
  }
  comm.barrier();
}

TEST(ProcessGroupCommunicator, ArgumentsAreChecked) {
  Communicator& comm = *g_comm;
  std::vector<int> v(4);
  EXPECT_THROW(comm.irecv(std::span<int>(v), comm.size(), 0).wait(), Error);
  EXPECT_THROW(comm.isend(std::span<const int>(v), 0, -3).wait(), Error);
  EXPECT_THROW(comm.isend(std::span<const int>(v), 0, torch_binding::kCollectiveTag).wait(), Error);
  std::unique_ptr<Communicator> sub = comm.split(0, comm.rank());
  EXPECT_THROW(sub->irecv(std::span<int>(v), 0, torch_binding::kSubGroupTags / 2).wait(), Error);
  std::vector<std::byte> send(static_cast<size_t>(comm.size()) * 3);
  std::vector<std::byte> recv(send.size() + static_cast<size_t>(comm.size()));
  EXPECT_THROW(comm.all_to_all(std::span<const std::byte>(send), std::span<std::byte>(recv)),
               Error);
  comm.barrier();
}

c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(const std::string& store_path, int rank,
                                                  int size) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, size);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
}

}  // namespace
}  // namespace cpattn::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The deadline test closes the group: it runs only when asked for.
  if (GTEST_FLAG_GET(filter) == "*") GTEST_FLAG_SET(filter, "-ProcessGroupDeadline.*");
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s RANK SIZE STORE_FILE [GoogleTest flags]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int size = std::atoi(argv[2]);
  try {
    const auto group = cpattn::testing::gloo_group(argv[3], rank, size);
    // A bug fails the run after this deadline instead of hanging it.
    cpattn::torch_binding::ProcessGroupCommunicator comm(group, std::chrono::seconds(30));
    cpattn::testing::g_comm = &comm;
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new cpattn::testing::RankFailurePrinter(rank));
    }
    // Each rank's status is its own (run_ranks.sh fails the run when any rank failed).
    const int status = RUN_ALL_TESTS() != 0 ? 1 : 0;
    cpattn::testing::g_comm = nullptr;
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: fatal: %s\n", rank, e.what());
    return 1;
  }
}
