// Linear forward against a double reference, backward against finite differences.
#include "train/linear.h"

#include <gtest/gtest.h>

#include "cpattn/error.h"
#include "grad_check.h"
#include "train/blas.h"

namespace cpattn::train {
namespace {

using namespace testing;  // grad_check.h: numeric gradients, random inputs

struct LinearCase {
  int64_t n, in, out;
  bool bias;
};

std::string case_name(const ::testing::TestParamInfo<LinearCase>& info) {
  const LinearCase& c = info.param;
  return detail::str_cat("N", c.n, "_in", c.in, "_out", c.out, c.bias ? "_bias" : "_nobias");
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, ForwardMatchesDoubleReference) {
  const LinearCase c = GetParam();
  const auto x = random_vector(static_cast<size_t>(c.n * c.in), 1);
  const auto w = random_vector(static_cast<size_t>(c.out * c.in), 2);
  const auto b = c.bias ? random_vector(static_cast<size_t>(c.out), 3) : std::vector<float>{};
  std::vector<float> y(static_cast<size_t>(c.n * c.out), 7.0f);
  linear_forward({c.n, c.in, c.out}, x, w, b, y);
  for (int64_t r = 0; r < c.n; ++r) {
    for (int64_t o = 0; o < c.out; ++o) {
      double ref = c.bias ? b[o] : 0.0;
      for (int64_t i = 0; i < c.in; ++i)
        ref += static_cast<double>(x[r * c.in + i]) * w[o * c.in + i];
      EXPECT_NEAR(y[r * c.out + o], ref, 1e-5 * (1.0 + static_cast<double>(c.in)))
          << "row " << r << " col " << o;
    }
  }
}

TEST_P(LinearTest, BackwardMatchesFiniteDifferences) {
  const LinearCase c = GetParam();
  auto x = random_vector(static_cast<size_t>(c.n * c.in), 11);
  auto w = random_vector(static_cast<size_t>(c.out * c.in), 12);
  auto b = c.bias ? random_vector(static_cast<size_t>(c.out), 13) : std::vector<float>{};
  const auto r = random_vector(static_cast<size_t>(c.n * c.out), 14);  // dL/dy
  std::vector<float> y(r.size());
  auto loss = [&] {
    linear_forward({c.n, c.in, c.out}, x, w, b, y);
    return weighted_sum(y, r);
  };
  // dw and db accumulate: start from a known offset and subtract it afterwards.
  std::vector<float> dx(x.size()), dw(w.size(), 0.5f), db(b.size(), -0.25f);
  linear_backward({c.n, c.in, c.out}, r, x, w, dx, dw, db);
  for (float& v : dw) v -= 0.5f;
  for (float& v : db) v += 0.25f;
  expect_grad_near(dx, numeric_grad(x, loss), 1e-3, "dx");
  expect_grad_near(dw, numeric_grad(w, loss), 1e-3, "dw");
  if (c.bias) expect_grad_near(db, numeric_grad(b, loss), 1e-3, "db");
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinearTest,
                         ::testing::Values(LinearCase{1, 1, 1, false}, LinearCase{3, 5, 7, true},
                                           LinearCase{17, 13, 9, false},
                                           LinearCase{33, 40, 3, true}, LinearCase{7, 2, 31, true}),
                         case_name);

TEST(Linear, EmptyDxIsSkippedAndZeroRowsIsANoOp) {
  const auto x = random_vector(12, 1), w = random_vector(8, 2), dy = random_vector(6, 3);
  std::vector<float> dw(8, 0.0f);
  linear_backward({3, 4, 2}, dy, x, w, {}, dw, {});
  EXPECT_NE(dw[0], 0.0f);
  std::vector<float> dw0(8, 1.0f);
  linear_backward({0, 4, 2}, {}, {}, w, {}, dw0, {});
  EXPECT_EQ(dw0, std::vector<float>(8, 1.0f));
}

TEST(Linear, ShapeErrorsNameTheArgumentAndSizes) {
  const std::vector<float> x(14), w(35);
  std::vector<float> y(21);
  try {
    linear_forward({3, 5, 7}, x, w, {}, y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
    EXPECT_STREQ(e.what(), "linear_forward: x [N, in] = [3, 5] needs 15 floats, got 14");
  }
  EXPECT_THROW(linear_forward({3, 0, 7}, {}, {}, {}, y), Error);
}

TEST(Linear, BlasThreadsCanBeSetToOne) {
  const int before = blas_threads();
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  set_blas_threads(before);
  EXPECT_THROW(set_blas_threads(0), Error);
}

}  // namespace
}  // namespace cpattn::train
