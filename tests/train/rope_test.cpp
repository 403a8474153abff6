// RoPE: known rotations, backward = inverse (and matches finite differences), relative-position
// invariance of q.k, and in-place rotation of the q/k parts of a fused QKV row only.
#include "train/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "cpattn/error.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

using namespace testing;  // grad_check.h: numeric gradients, random inputs

constexpr double kBase = 10000.0;

TEST(Rope, PositionZeroIsIdentityAndPairsRotateByTheirFrequency) {
  // head_dim 4: pair 0 turns by pos rad, pair 1 by pos / sqrt(base) rad.
  std::vector<float> x = {1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f, 1.0f};
  const std::vector<int64_t> pos = {0, 3};
  rope_forward({2, 1, 4, 4}, x, RopeTable(pos, 4, kBase));
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[3], 1.0f);
  const double a0 = 3.0, a1 = 3.0 / std::sqrt(kBase);
  EXPECT_NEAR(x[4], std::cos(a0), 1e-7);
  EXPECT_NEAR(x[5], std::sin(a0), 1e-7);
  EXPECT_NEAR(x[6], -std::sin(a1), 1e-7);
  EXPECT_NEAR(x[7], std::cos(a1), 1e-7);
}

TEST(Rope, LargePositionsStayAccurate) {
  std::vector<float> x = {1.0f, 0.0f};
  const std::vector<int64_t> pos = {1000003};
  rope_forward({1, 1, 2, 2}, x, RopeTable(pos, 2, kBase));
  EXPECT_NEAR(x[0], std::cos(1000003.0), 1e-7);
  EXPECT_NEAR(x[1], std::sin(1000003.0), 1e-7);
}

TEST(Rope, TableHoldsEachAngleRoundedOnceFromDouble) {
  const std::vector<int64_t> pos = {0, 5, 123456789};
  const int64_t hd = 6;
  const RopeTable table(pos, hd, kBase);
  EXPECT_EQ(table.rows(), 3);
  EXPECT_EQ(table.head_dim(), hd);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = static_cast<double>(pos[static_cast<size_t>(r)]) *
                           std::pow(kBase, -2.0 * static_cast<double>(i) / hd);
      EXPECT_EQ(table.cos_row(r)[i], static_cast<float>(std::cos(angle))) << r << " " << i;
      EXPECT_EQ(table.sin_row(r)[i], static_cast<float>(std::sin(angle))) << r << " " << i;
    }
  }
  EXPECT_EQ(RopeTable({}, 4, kBase).rows(), 0);
}

struct RopeCase {
  int64_t n, heads, head_dim;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, BackwardIsTheInverseAndMatchesFiniteDifferences) {
  const auto [n, heads, hd] = GetParam();
  const int64_t stride = heads * hd + 3;  // padded rows
  auto x = random_vector(static_cast<size_t>(n * stride), 1);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) pos[r] = 7 * r * r + 5;  // any order / gaps are fine
  const RopeDims dims{n, heads, hd, stride};
  const RopeTable table(pos, hd, kBase);
  std::vector<float> y = x;
  rope_forward(dims, y, table);
  std::vector<float> back = y;
  rope_backward(dims, back, table);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-6) << i;

  const auto w = random_vector(x.size(), 2);
  auto loss = [&] {
    y = x;
    rope_forward(dims, y, table);
    return weighted_sum(y, w);
  };
  std::vector<float> grad = w;
  rope_backward(dims, grad, table);
  // Padding columns pass through untouched: their gradient is w itself.
  expect_grad_near(grad, numeric_grad(x, loss), 1e-3, "dx");
}

TEST_P(RopeTest, DotProductDependsOnlyOnRelativePosition) {
  const int64_t heads = GetParam().heads, hd = GetParam().head_dim;
  const auto q = random_vector(static_cast<size_t>(heads * hd), 3);
  const auto k = random_vector(static_cast<size_t>(heads * hd), 4);
  auto dot_at = [&](int64_t pq, int64_t pk) {
    std::vector<float> a = q, b = k;
    const std::vector<int64_t> p1 = {pq}, p2 = {pk};
    rope_forward({1, heads, hd, heads * hd}, a, RopeTable(p1, hd, kBase));
    rope_forward({1, heads, hd, heads * hd}, b, RopeTable(p2, hd, kBase));
    return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
  };
  EXPECT_NEAR(dot_at(10, 4), dot_at(1010, 1004), 1e-4);
  EXPECT_NEAR(dot_at(3, 3), dot_at(0, 0), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Sizes, RopeTest,
                         ::testing::Values(RopeCase{1, 1, 2}, RopeCase{5, 3, 6}, RopeCase{9, 2, 16},
                                           RopeCase{4, 4, 40}),
                         [](const ::testing::TestParamInfo<RopeCase>& p) {
                           return detail::str_cat("N", p.param.n, "_H", p.param.heads, "_D",
                                                  p.param.head_dim);
                         });

TEST(Rope, RotatesOnlyTheSelectedHeadsOfAFusedQkvRow) {
  // qkv rows: [q: 2 heads x 4 | k: 1 head x 4 | v: 1 head x 4] = 16 floats.
  const int64_t n = 3, qkv = 16;
  const auto orig = random_vector(static_cast<size_t>(n * qkv), 5);
  std::vector<float> x = orig;
  const std::vector<int64_t> pos = {4, 9, 2};
  const RopeTable table(pos, 4, kBase);
  rope_forward({n, 2, 4, qkv}, x, table);
  rope_forward({n, 1, 4, qkv}, std::span(x).subspan(8), table);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 12; c < 16; ++c) EXPECT_EQ(x[r * qkv + c], orig[r * qkv + c]);
    EXPECT_NE(x[r * qkv], orig[r * qkv]);
    EXPECT_NE(x[r * qkv + 8], orig[r * qkv + 8]);
  }
}

TEST(Rope, ArgumentErrors) {
  std::vector<float> x(12);
  const std::vector<int64_t> pos = {0, 1};
  const RopeTable table(pos, 4, kBase);
  EXPECT_THROW(RopeTable(pos, 3, kBase), Error);               // odd head_dim
  EXPECT_THROW(RopeTable(pos, 0, kBase), Error);               // head_dim < 2
  EXPECT_THROW(RopeTable(pos, 4, 1.0), Error);                 // base
  EXPECT_THROW(RopeTable(pos, 4, std::nan("")), Error);        // base
  EXPECT_THROW(rope_forward({2, 1, 6, 6}, x, table), Error);   // head_dim differs
  EXPECT_THROW(rope_forward({2, 2, 4, 6}, x, table), Error);   // stride < heads*D
  EXPECT_THROW(rope_forward({3, 1, 4, 4}, x, table), Error);   // table too short
  EXPECT_THROW(rope_forward({1, 1, 4, 4}, x, table), Error);   // table too long
  EXPECT_THROW(rope_forward({2, 1, 4, 9}, x, table), Error);   // x too short (13 > 12)
  EXPECT_THROW(rope_backward({2, 1, 4, 9}, x, table), Error);  // x too short (13 > 12)
}

}  // namespace
}  // namespace cpattn::train
