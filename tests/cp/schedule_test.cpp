// The ring schedule against a hand-written table and its invariants for every P.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpattn/detail/cp.h"
#include "cpattn/error.h"

namespace cpattn::detail {
namespace {

TEST(RingStep, MatchesTheWorkedExampleOfRingH) {
  // P = 4, rank 1 (cpattn/detail/cp.h and docs/ring.md). Fields: kv_block, kv_send_to,
  // kv_recv_from, next_kv_block, grad_recv_from, grad_send_to, home_grad_recv_from.
  const std::vector<RingStep> want = {
      {1, 2, 0, 0, -1, 2, -1},
      {0, 2, 0, 3, 0, 2, -1},
      {3, 2, 0, 2, 0, 2, -1},
      {2, -1, -1, -1, 0, 2, 0},
  };
  for (int s = 0; s < 4; ++s) EXPECT_EQ(ring_step(1, 4, s), want[s]) << "step " << s;
}

TEST(RingStep, SingleRankTalksToNobody) {
  EXPECT_EQ(ring_step(0, 1, 0), (RingStep{0, -1, -1, -1, -1, -1, -1}));
}

TEST(RingStep, TwoRanksTable) {
  EXPECT_EQ(ring_step(0, 2, 0), (RingStep{0, 1, 1, 1, -1, 1, -1}));
  EXPECT_EQ(ring_step(0, 2, 1), (RingStep{1, -1, -1, -1, 1, 1, 1}));
  EXPECT_EQ(ring_step(1, 2, 0), (RingStep{1, 0, 0, 0, -1, 0, -1}));
  EXPECT_EQ(ring_step(1, 2, 1), (RingStep{0, -1, -1, -1, 0, 0, 0}));
}

class RingScheduleInvariants : public ::testing::TestWithParam<int> {};

TEST_P(RingScheduleInvariants, EveryBlockOnceAndMessagesMatch) {
  const int P = GetParam();
  int kv_sends = 0, grad_sends = 0;
  for (int r = 0; r < P; ++r) {
    std::vector<int> seen(static_cast<size_t>(P), 0);
    for (int s = 0; s < P; ++s) {
      const RingStep st = ring_step(r, P, s);
      ++seen[static_cast<size_t>(st.kv_block)];
      if (st.kv_send_to >= 0) {
        ++kv_sends;
        // What r relays at step s is what its receiver computes at step s + 1, and the receiver
        // expects it from r.
        const RingStep peer = ring_step(st.kv_send_to, P, s);
        EXPECT_EQ(peer.kv_recv_from, r);
        EXPECT_EQ(peer.next_kv_block, st.kv_block);
        EXPECT_EQ(ring_step(st.kv_send_to, P, s + 1).kv_block, st.kv_block);
      }
      if (st.grad_send_to >= 0) {
        ++grad_sends;
        if (s + 1 < P) {
          // The accumulator continues on the receiver's next step, for the same block.
          const RingStep peer = ring_step(st.grad_send_to, P, s + 1);
          EXPECT_EQ(peer.grad_recv_from, r);
          EXPECT_EQ(peer.kv_block, st.kv_block);
        } else {
          EXPECT_EQ(st.grad_send_to, st.kv_block) << "last hop must reach the home rank";
          // ... which takes it from r at that same last step.
          EXPECT_EQ(ring_step(st.grad_send_to, P, s).home_grad_recv_from, r);
        }
      }
      EXPECT_EQ(st.home_grad_recv_from >= 0, P > 1 && s + 1 == P) << "rank " << r << " step " << s;
    }
    for (int b = 0; b < P; ++b) EXPECT_EQ(seen[static_cast<size_t>(b)], 1) << "block " << b;
  }
  // docs/ring.md: per rank P - 1 k/v relays and P accumulator sends (none when P == 1).
  EXPECT_EQ(kv_sends, P * (P - 1));
  EXPECT_EQ(grad_sends, P > 1 ? P * P : 0);
}

INSTANTIATE_TEST_SUITE_P(World, RingScheduleInvariants, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& tp) { return "cp" + std::to_string(tp.param); });

TEST(RingStep, RejectsOutOfRange) {
  EXPECT_THROW(ring_step(4, 4, 0), Error);
  EXPECT_THROW(ring_step(0, 4, 4), Error);
  EXPECT_THROW(ring_step(0, 0, 0), Error);
}

}  // namespace
}  // namespace cpattn::detail
