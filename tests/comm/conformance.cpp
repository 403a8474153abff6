// Conformance checks shared by both backends (see conformance.h).
#include "comm/conformance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "cpattn/error.h"

namespace cpattn::testing {

namespace {

constexpr size_t kMiB = size_t{1} << 20;

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int next_rank(const Communicator& c) { return (c.rank() + 1) % c.size(); }
int prev_rank(const Communicator& c) { return (c.rank() + c.size() - 1) % c.size(); }

// Sends n bytes to the next rank and receives from the previous one into a buffer `slack` bytes
// larger than the message, checking the byte count, the content and that the slack is untouched.
void ring_exchange(Communicator& comm, size_t n, int tag) {
  const std::vector<std::byte> out = message_bytes(comm.rank(), next_rank(comm), tag, n);
  constexpr size_t kSlack = 3;
  std::vector<std::byte> in(n + kSlack, std::byte{0xEE});
  Request recv = comm.irecv(std::span<std::byte>(in), prev_rank(comm), tag);
  Request send = comm.isend(std::span<const std::byte>(out), next_rank(comm), tag);
  EXPECT_EQ(recv.wait(), n);
  EXPECT_EQ(send.wait(), n);
  const std::vector<std::byte> expected = message_bytes(prev_rank(comm), comm.rank(), tag, n);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), in.begin()))
      << "rank " << comm.rank() << ": ring message of " << n << " bytes differs";
  for (size_t i = n; i < in.size(); ++i) EXPECT_EQ(in[i], std::byte{0xEE}) << "byte " << i;
}

// Every rank posts `tags` receives (distinct sizes), sends in reverse tag order, then waits on
// the receives in a scrambled order. Also three same-tag messages that must arrive in order.
void many_tags_out_of_order(Communicator& comm, int tags) {
  auto size_of = [](int tag) { return static_cast<size_t>(1 + tag * 37 % 1001); };
  std::vector<std::vector<std::byte>> in(static_cast<size_t>(tags));
  std::vector<Request> recvs;
  for (int t = 0; t < tags; ++t) {
    in[static_cast<size_t>(t)].resize(size_of(t));
    recvs.push_back(
        comm.irecv(std::span<std::byte>(in[static_cast<size_t>(t)]), prev_rank(comm), t));
  }
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(tags));
  std::vector<Request> sends;
  for (int t = tags - 1; t >= 0; --t) {
    out[static_cast<size_t>(t)] = message_bytes(comm.rank(), next_rank(comm), t, size_of(t));
    sends.push_back(
        comm.isend(std::span<const std::byte>(out[static_cast<size_t>(t)]), next_rank(comm), t));
  }
  for (int k = 0; k < tags; ++k) {
    const int t = (k * 7 + 3) % tags;  // 7 is coprime with the tag counts used
    ASSERT_EQ(recvs[static_cast<size_t>(t)].wait(), size_of(t)) << "tag " << t;
    EXPECT_EQ(in[static_cast<size_t>(t)],
              message_bytes(prev_rank(comm), comm.rank(), t, size_of(t)))
        << "tag " << t;
  }
  for (Request& s : sends) s.wait();

  // Non-overtaking: same (source, tag) arrives in sending order.
  constexpr int kSameTag = 1000;
  std::vector<std::vector<std::byte>> fifo_in(3, std::vector<std::byte>(16));
  std::vector<Request> fifo;
  for (auto& buf : fifo_in)
    fifo.push_back(comm.irecv(std::span<std::byte>(buf), prev_rank(comm), kSameTag));
  std::vector<std::vector<std::byte>> fifo_out;
  for (int i = 0; i < 3; ++i) fifo_out.push_back(message_bytes(comm.rank(), i, kSameTag, 16));
  for (auto& buf : fifo_out) {
    fifo.push_back(comm.isend(std::span<const std::byte>(buf), next_rank(comm), kSameTag));
  }
  for (auto it = fifo.rbegin(); it != fifo.rend(); ++it) it->wait();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(fifo_in[static_cast<size_t>(i)], message_bytes(prev_rank(comm), i, kSameTag, 16))
        << "message " << i << " of a same-tag sequence";
  }
}

void all_to_all_bytes(Communicator& comm, size_t block) {
  const auto p = static_cast<size_t>(comm.size());
  std::vector<std::byte> send(block * p);
  for (size_t j = 0; j < p; ++j) {
    const auto b = message_bytes(comm.rank(), static_cast<int>(j), 77, block);
    std::copy(b.begin(), b.end(), send.begin() + static_cast<ptrdiff_t>(j * block));
  }
  std::vector<std::byte> recv(block * p);
  comm.all_to_all(std::span<const std::byte>(send), std::span<std::byte>(recv));
  for (size_t j = 0; j < p; ++j) {
    const auto b = message_bytes(static_cast<int>(j), comm.rank(), 77, block);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), recv.begin() + static_cast<ptrdiff_t>(j * block)))
        << "rank " << comm.rank() << ": block from rank " << j;
  }
}

// Input of rank r, element i: integers (exact in float) or arbitrary-magnitude reals.
template <typename T>
T allreduce_input(int rank, size_t i, bool integers) {
  if (integers) return static_cast<T>((rank + 1) * static_cast<int>(i % 97) - 50 * rank);
  const uint64_t bits = splitmix((static_cast<uint64_t>(rank) << 40) ^ i);
  const double u = static_cast<double>(bits >> 11) * 0x1p-53;  // [0, 1)
  return static_cast<T>((u - 0.5) * std::ldexp(1.0, static_cast<int>(bits % 16) - 8));
}

// Checks allreduce_sum against the documented fixed order ((x_0 + x_1) + x_2) + ... computed
// here in T (bitwise), and against a double reference (exact for integers, else an error bound
// of (P - 1) * eps * sum |x_r|). Calls it twice: the result must not change run to run.
template <typename T>
void allreduce(Communicator& comm, size_t n, bool integers) {
  std::vector<T> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = allreduce_input<T>(comm.rank(), i, integers);
  std::vector<T> again = data;
  comm.allreduce_sum(std::span<T>(data));
  comm.allreduce_sum(std::span<T>(again));
  const T eps = std::numeric_limits<T>::epsilon();
  for (size_t i = 0; i < n; ++i) {
    T ordered = allreduce_input<T>(0, i, integers);
    double exact = static_cast<double>(ordered);
    double magnitude = std::abs(exact);
    for (int r = 1; r < comm.size(); ++r) {
      const T x = allreduce_input<T>(r, i, integers);
      ordered += x;
      exact += static_cast<double>(x);
      magnitude += std::abs(static_cast<double>(x));
    }
    ASSERT_EQ(std::memcmp(&data[i], &ordered, sizeof(T)), 0)
        << "rank " << comm.rank() << " element " << i << ": got " << data[i] << ", rank-order sum "
        << ordered;
    ASSERT_EQ(std::memcmp(&again[i], &data[i], sizeof(T)), 0) << "second call, element " << i;
    if (integers) {
      ASSERT_EQ(static_cast<double>(data[i]), exact) << "element " << i;
    } else {
      ASSERT_NEAR(static_cast<double>(data[i]), exact,
                  (comm.size() - 1) * static_cast<double>(eps) * magnitude)
          << "element " << i;
    }
  }
}

void truncated_receive(Communicator& comm) {
  const std::vector<std::byte> out = message_bytes(comm.rank(), next_rank(comm), 9, 101);
  std::vector<std::byte> in(57);
  Request recv = comm.irecv(std::span<std::byte>(in), prev_rank(comm), 9);
  Request send = comm.isend(std::span<const std::byte>(out), next_rank(comm), 9);
  try {
    recv.wait();
    ADD_FAILURE() << "a 101-byte message into a 57-byte buffer did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCommunication);
    EXPECT_NE(std::string(e.what()).find("57"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(detail::str_cat("rank ", prev_rank(comm))),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(send.wait(), 101u);
  comm.barrier();  // nobody starts the next case while a peer still checks this one
}

// Errors inside a sub-group name each rank both ways: its rank there and in the group split,
// so that a failure in one of the hybrid's rows or columns names the thread or process it is
// about. A truncated receive in the columns (color = rank % 2).
void split_errors_name_group_ranks(Communicator& comm) {
  const int column = comm.rank() % 2;
  std::unique_ptr<Communicator> sub = comm.split(column, comm.rank());
  const auto group_rank = [&](int r) { return column + 2 * r; };  // members column, column + 2..
  const std::vector<std::byte> out = message_bytes(sub->rank(), next_rank(*sub), 9, 101);
  std::vector<std::byte> in(57);
  Request recv = sub->irecv(std::span<std::byte>(in), prev_rank(*sub), 9);
  Request send = sub->isend(std::span<const std::byte>(out), next_rank(*sub), 9);
  try {
    recv.wait();
    ADD_FAILURE() << "a 101-byte message into a 57-byte buffer did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCommunication);
    // "group rank" (in-process ranks, MPI) or "process group rank" (torch.distributed).
    const auto expected = [&](const char* group) {
      return detail::str_cat("rank ", sub->rank(), " of a sub-group (", group, " rank ",
                             comm.rank(), "): message from rank ", prev_rank(*sub),
                             " of a sub-group (", group, " rank ", group_rank(prev_rank(*sub)),
                             ")");
    };
    const std::string what = e.what();
    EXPECT_TRUE(what.find(expected("group")) != std::string::npos ||
                what.find(expected("process group")) != std::string::npos)
        << what << "\nexpected: " << expected("group");
  }
  EXPECT_EQ(send.wait(), 101u);
  // A peer outside the sub-group, refused where it is posted, names this rank both ways too.
  try {
    Request bad = sub->isend(std::span<const std::byte>(out), sub->size(), 9);
    ADD_FAILURE() << "an isend to rank " << sub->size() << " of a " << sub->size()
                  << "-rank sub-group did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const auto expected = [&](const char* group) {
      return detail::str_cat("rank ", sub->rank(), " of a sub-group (", group, " rank ",
                             comm.rank(), "): isend");
    };
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with(expected("group")) || what.starts_with(expected("process group")))
        << what << "\nexpected: " << expected("group");
  }
  comm.barrier();
}

// A barrier releases no rank before the last one entered (ranks enter staggered by 15 ms).
void barrier_orders(Communicator& comm) {
  using Clock = std::chrono::steady_clock;
  std::this_thread::sleep_for(std::chrono::milliseconds(15 * (comm.size() - 1 - comm.rank())));
  const int64_t entered = Clock::now().time_since_epoch().count();
  comm.barrier();
  const int64_t left = Clock::now().time_since_epoch().count();
  std::vector<int64_t> mine(static_cast<size_t>(comm.size()), entered);
  std::vector<int64_t> all(mine.size());
  comm.all_to_all(std::span<const int64_t>(mine), std::span<int64_t>(all));
  for (size_t r = 0; r < all.size(); ++r)
    EXPECT_LE(all[r], left) << "rank " << r << " entered late";
}

// A higher layer's per-group state (Communicator::layer_state): default-constructed at first use,
// kept across uses, one per type, and a split's sub-group starts with its own.
void layer_state_is_per_communicator(Communicator& comm) {
  struct Count {
    int n = 0;
  };
  struct Other {
    int n = 100;
  };
  EXPECT_EQ(comm.layer_state<Count>().n, 0);
  comm.layer_state<Count>().n += 5;
  EXPECT_EQ(comm.layer_state<Count>().n, 5);
  EXPECT_EQ(comm.layer_state<Other>().n, 100);
  std::unique_ptr<Communicator> sub = comm.split(0, comm.rank());
  EXPECT_EQ(sub->layer_state<Count>().n, 0);
  sub->layer_state<Count>().n = 9;
  EXPECT_EQ(comm.layer_state<Count>().n, 5);
}

// Split into rows of `width` consecutive ranks (color = rank / width) with reversed keys, so a
// row numbers its members backwards. Checks rank/size, point-to-point and collectives inside the
// row while the parent exchanges a message with the same tag, so neither can match the other's.
void split_rows(Communicator& comm, int width) {
  const int p = comm.size();
  const int row = comm.rank() / width;
  const int row_begin = row * width;
  const int row_size = std::min(width, p - row_begin);
  std::unique_ptr<Communicator> sub = comm.split(row, -comm.rank());
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), row_size);
  EXPECT_EQ(sub->rank(), row_begin + row_size - 1 - comm.rank()) << "keys order the sub-group";
  EXPECT_EQ(sub->timeout(), comm.timeout());
  EXPECT_EQ(&sub->memory(), &comm.memory());
  // The parent's message posted first, with the tag the row uses too.
  const std::vector<std::byte> parent_out = message_bytes(comm.rank(), next_rank(comm), 3, 40);
  std::vector<std::byte> parent_in(40);
  Request parent_recv = comm.irecv(std::span<std::byte>(parent_in), prev_rank(comm), 3);
  Request parent_send = comm.isend(std::span<const std::byte>(parent_out), next_rank(comm), 3);
  ring_exchange(*sub, 1000, 3);
  all_to_all_bytes(*sub, 13);
  allreduce<double>(*sub, 5, true);
  sub->barrier();
  EXPECT_EQ(parent_recv.wait(), 40u);
  parent_send.wait();
  EXPECT_EQ(parent_in, message_bytes(prev_rank(comm), comm.rank(), 3, 40));
  // A sub-group of the sub-group: pairs inside the row.
  std::unique_ptr<Communicator> pair = sub->split(sub->rank() / 2, sub->rank());
  EXPECT_EQ(pair->rank(), sub->rank() % 2);
  EXPECT_EQ(pair->size(), std::min(2, sub->size() - sub->rank() / 2 * 2));
  ring_exchange(*pair, 77, 3);
  allreduce<float>(*pair, 31, false);
  comm.barrier();
}

// Columns (color = rank % 2) made twice in a row: the second split's messages stay apart from the
// first's, and both work after the other was made.
void split_columns_twice(Communicator& comm) {
  std::unique_ptr<Communicator> a = comm.split(comm.rank() % 2, comm.rank());
  std::unique_ptr<Communicator> b = comm.split(comm.rank() % 2, comm.rank());
  EXPECT_EQ(a->rank(), comm.rank() / 2);
  EXPECT_EQ(b->rank(), comm.rank() / 2);
  const int n = a->size();
  const std::vector<std::byte> out_a = message_bytes(a->rank(), (a->rank() + 1) % n, 1, 64);
  const std::vector<std::byte> out_b = message_bytes(b->rank(), (b->rank() + 1) % n, 2, 64);
  std::vector<std::byte> in_a(64), in_b(64);
  // b's receive is posted first; a's message with the same tag must not land there.
  Request rb = b->irecv(std::span<std::byte>(in_b), (b->rank() + n - 1) % n, 0);
  Request ra = a->irecv(std::span<std::byte>(in_a), (a->rank() + n - 1) % n, 0);
  Request sa = a->isend(std::span<const std::byte>(out_a), (a->rank() + 1) % n, 0);
  Request sb = b->isend(std::span<const std::byte>(out_b), (b->rank() + 1) % n, 0);
  ra.wait();
  rb.wait();
  sa.wait();
  sb.wait();
  EXPECT_EQ(in_a, message_bytes((a->rank() + n - 1) % n, a->rank(), 1, 64));
  EXPECT_EQ(in_b, message_bytes((b->rank() + n - 1) % n, b->rank(), 2, 64));
  comm.barrier();
}

void split_negative_color_fails_everywhere(Communicator& comm) {
  try {
    comm.split(comm.rank() == comm.size() - 1 ? -1 : 0, 0);
    ADD_FAILURE() << "a negative color was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(detail::str_cat("rank ", comm.size() - 1, " passed -1")),
              std::string::npos)
        << e.what();
  }
  comm.barrier();
}

}  // namespace

std::vector<std::byte> message_bytes(int src, int dst, int tag, size_t n) {
  std::vector<std::byte> out(n);
  const uint64_t seed = (static_cast<uint64_t>(src) << 48) ^ (static_cast<uint64_t>(dst) << 32) ^
                        static_cast<uint64_t>(static_cast<uint32_t>(tag));
  size_t i = 0;
  for (uint64_t w = 0; i + 8 <= n; ++w, i += 8) {
    const uint64_t v = splitmix(seed * 0x100000001b3ULL + w);
    std::memcpy(out.data() + i, &v, 8);
  }
  const uint64_t last = splitmix(~seed);
  for (size_t k = 0; i < n; ++i, ++k) out[i] = static_cast<std::byte>(last >> (8 * k));
  return out;
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}, size_t{1000003}}) {
    cases.push_back(
        {detail::str_cat("Ring_", n, "B"), [n](Communicator& c) { ring_exchange(c, n, 5); }});
  }
  cases.push_back({"Ring_64MiB", [](Communicator& c) { ring_exchange(c, 64 * kMiB, 6); }, 4});
  cases.push_back({"ManyTagsOutOfOrder", [](Communicator& c) { many_tags_out_of_order(c, 40); }});
  for (size_t block : {size_t{0}, size_t{1}, size_t{13}, size_t{65537}}) {
    cases.push_back({detail::str_cat("AllToAll_", block, "B"),
                     [block](Communicator& c) { all_to_all_bytes(c, block); }});
  }
  for (size_t n : {size_t{1}, size_t{5}, size_t{1031}}) {
    const std::string s = std::to_string(n);
    cases.push_back(
        {"AllreduceIntegersFloat_" + s, [n](Communicator& c) { allreduce<float>(c, n, true); }});
    cases.push_back(
        {"AllreduceIntegersDouble_" + s, [n](Communicator& c) { allreduce<double>(c, n, true); }});
    cases.push_back(
        {"AllreduceRealsFloat_" + s, [n](Communicator& c) { allreduce<float>(c, n, false); }});
    cases.push_back(
        {"AllreduceRealsDouble_" + s, [n](Communicator& c) { allreduce<double>(c, n, false); }});
  }
  cases.push_back({"AllreduceEmpty", [](Communicator& c) { allreduce<float>(c, 0, true); }});
  cases.push_back({"TruncatedReceiveFails", truncated_receive});
  cases.push_back({"LayerStateIsPerCommunicator", layer_state_is_per_communicator});
  cases.push_back({"SplitRowsOfTwo", [](Communicator& c) { split_rows(c, 2); }});
  cases.push_back({"SplitRowsOfThree", [](Communicator& c) { split_rows(c, 3); }});
  cases.push_back({"SplitColumnsTwice", split_columns_twice});
  cases.push_back({"SplitNegativeColorFails", split_negative_color_fails_everywhere});
  cases.push_back({"SplitErrorsNameGroupRanks", split_errors_name_group_ranks});
  cases.push_back({"BarrierWaitsForLastRank", barrier_orders});
  return cases;
}

}  // namespace cpattn::testing
