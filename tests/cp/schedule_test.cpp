// The ring schedule against a hand-written table, its invariants for every P, and the fp32 LSE
// merge (identity, symmetry, agreement with a one-shot softmax).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(RingStep, MatchesTheWorkedExampleOfRingH) {
  // P = 4, rank 1 (ring.h and docs/ring.md). Fields: kv_block, kv_send_to, kv_recv_from,
  // next_kv_block, grad_recv_from, grad_send_to, home_grad_recv_from.
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

TEST(MergeLse, IdentityAndSymmetry) {
  EXPECT_EQ(merge_lse(-kInf, -kInf), -kInf);
  EXPECT_EQ(merge_lse(-kInf, 1.5f), 1.5f);
  EXPECT_EQ(merge_lse(2.25f, -kInf), 2.25f);
  EXPECT_EQ(merge_lse(0.3f, -7.0f), merge_lse(-7.0f, 0.3f));
  EXPECT_NEAR(merge_lse(0.0f, 0.0f), std::log(2.0f), 1e-7);
  // Far apart: the small term must not vanish into NaN or overflow.
  EXPECT_FLOAT_EQ(merge_lse(80.0f, -80.0f), 80.0f);
  EXPECT_FALSE(std::isnan(merge_lse(1e30f, 1e30f)));
}

// Two partials of a softmax over disjoint key sets merge into the softmax over their union.
TEST(MergeAttentionPartials, EqualsOneShotSoftmaxAndHandlesEmptyRows) {
  // [B=1, S=3, H=1, Dv=2]; row 0 sees keys in both halves, row 1 only in the second, row 2 none.
  const std::vector<std::vector<double>> scores_a = {{0.5, -1.0}, {}, {}};
  const std::vector<std::vector<double>> scores_b = {{2.0}, {0.25, 1.0, -3.0}, {}};
  const std::vector<std::vector<double>> values_a = {{1.0, 2.0}, {-1.0, 0.5}};
  const std::vector<std::vector<double>> values_b = {{3.0, -1.0}, {0.0, 1.0}, {2.0, 2.0}};
  auto partial = [](const std::vector<double>& s, const std::vector<std::vector<double>>& v,
                    float* out, float* lse) {
    if (s.empty()) {
      *lse = -kInf;
      out[0] = out[1] = 0.0f;
      return;
    }
    double sum = 0;
    for (double x : s) sum += std::exp(x);
    *lse = static_cast<float>(std::log(sum));
    for (int d = 0; d < 2; ++d) {
      double acc = 0;
      for (size_t j = 0; j < s.size(); ++j)
        acc += std::exp(s[j]) / sum * v[j][static_cast<size_t>(d)];
      out[d] = static_cast<float>(acc);
    }
  };
  Tensor out_a({1, 3, 1, 2}), out_b({1, 3, 1, 2}), lse_a({1, 1, 3}), lse_b({1, 1, 3});
  for (int i = 0; i < 3; ++i) {
    partial(scores_a[i], values_a, out_a.data() + 2 * i, lse_a.data() + i);
    partial(scores_b[i], values_b, out_b.data() + 2 * i, lse_b.data() + i);
  }
  merge_attention_partials(out_a.view(), lse_a.span(), out_b.view(), lse_b.span());
  for (int i = 0; i < 3; ++i) {
    std::vector<double> s = scores_a[i];
    std::vector<std::vector<double>> v(values_a.begin(), values_a.begin() + scores_a[i].size());
    s.insert(s.end(), scores_b[i].begin(), scores_b[i].end());
    v.insert(v.end(), values_b.begin(), values_b.begin() + scores_b[i].size());
    float want_out[2], want_lse;
    partial(s, v, want_out, &want_lse);
    if (std::isinf(want_lse)) {
      EXPECT_EQ(lse_a.data()[i], want_lse) << "row " << i;
    } else {
      EXPECT_NEAR(lse_a.data()[i], want_lse, 1e-6) << "row " << i;
    }
    for (int d = 0; d < 2; ++d) EXPECT_NEAR(out_a.data()[2 * i + d], want_out[d], 1e-6);
  }
  EXPECT_EQ(lse_a.data()[2], -kInf);
  EXPECT_EQ(out_a.data()[4], 0.0f);
}

TEST(MergeAttentionPartials, RejectsShapeMismatch) {
  Tensor a({1, 2, 1, 2}), b({1, 3, 1, 2}), la({1, 1, 2}), lb({1, 1, 3});
  EXPECT_THROW(merge_attention_partials(a.view(), la.span(), b.view(), lb.span()), Error);
}

}  // namespace
}  // namespace cpattn
