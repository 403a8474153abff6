// Cross-entropy: double reference, stability for huge logits, finite-difference backward, and the
// CP property that shards normalised by the global count sum to the full mean.
#include "train/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpattn/error.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

using testing::expect_grad_near;
using testing::numeric_grad;
using testing::random_vector;

double reference_mean(int64_t vocab, const std::vector<float>& logits,
                      const std::vector<int32_t>& targets) {
  double sum = 0.0;
  for (size_t r = 0; r < targets.size(); ++r) {
    double z = 0.0;
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(logits[r * vocab + v]));
    sum += std::log(z) - logits[r * vocab + targets[r]];
  }
  return sum / static_cast<double>(targets.size());
}

TEST(CrossEntropy, MatchesReferenceAndUniformLogitsGiveLogVocab) {
  const int64_t vocab = 11;
  const auto logits = random_vector(5 * vocab, 1, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 10, 3, 3, 7};
  EXPECT_NEAR(cross_entropy_forward(vocab, logits, targets, 5),
              reference_mean(vocab, logits, targets), 1e-6);
  // Equal logits: every exp is exp(0) = 1 exactly, so the loss is log(vocab) to double rounding.
  const std::vector<float> flat(3 * 256, 0.25f);
  const std::vector<int32_t> t3 = {1, 200, 255};
  EXPECT_NEAR(cross_entropy_forward(256, flat, t3, 3), std::log(256.0), 1e-12);
}

// Random logits, spread as wide as a trained LM head's, over odd vocabulary sizes (the vector
// loop's tails) up to 2^16: 1e-10 to 6e-9 from the double reference (errors of random sign
// cancel), checked at 1e-7, which a float sum of the exps (7.7e-6 off at 2^16) or exps 1e-4 off
// would fail.
TEST(CrossEntropy, RandomLogitsWithinTheDoubleReference) {
  for (const int64_t vocab : {1, 7, 97, 256, 1025, 65536}) {
    for (const float spread : {1.0f, 8.0f, 30.0f}) {
      const auto logits = random_vector(static_cast<size_t>(3 * vocab), 7, -spread, spread);
      const std::vector<int32_t> targets = {0, static_cast<int32_t>(vocab - 1),
                                            static_cast<int32_t>(vocab / 2)};
      EXPECT_NEAR(cross_entropy_forward(vocab, logits, targets, 3),
                  reference_mean(vocab, logits, targets), 1e-7)
          << "vocab " << vocab << ", logits in [-" << spread << ", " << spread << "]";
    }
  }
}

// The documented bound's worst case: every rounding of l - m in one direction, all 2^16 - 1
// other logits ln(2^16) below the largest, so their exps weigh as much as its own (5.0e-7 off,
// bound 8.4e-7).
TEST(CrossEntropy, WorstCaseRoundingWithinTheDocumentedBound) {
  const int64_t vocab = int64_t{1} << 16;
  std::vector<float> logits(static_cast<size_t>(vocab), -4.25f);
  logits[0] = 4.00000238f;
  const std::vector<int32_t> target = {0};
  EXPECT_NEAR(cross_entropy_forward(vocab, logits, target, 1),
              reference_mean(vocab, logits, target), 8.4e-7);
}

// The trainer stops (or skips) a step on a non-finite loss, so a non-finite logit must not give
// a finite one: NaN, +inf and a row of -inf each give a NaN loss and NaN gradients in their row
// (a finite row beside them keeps finite gradients); a -inf among finite logits is exp 0.
TEST(CrossEntropy, NonFiniteLogitsGiveANonFiniteLoss) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t vocab = 11;  // a vector body and a tail
  for (const std::vector<float>& bad :
       {std::vector<float>{nan}, std::vector<float>{kInf}, std::vector<float>(11, -kInf)}) {
    std::vector<float> logits(static_cast<size_t>(2 * vocab), 0.5f);
    std::copy(bad.begin(), bad.end(), logits.begin() + 3 * (bad.size() == 1));
    const std::vector<int32_t> targets = {2, 4};
    EXPECT_TRUE(std::isnan(cross_entropy_forward(vocab, logits, targets, 2))) << logits[3];
    std::vector<float> g(logits.size());
    EXPECT_TRUE(std::isnan(cross_entropy_backward(vocab, logits, targets, 2, 1.0f, g)));
    for (int64_t v = 0; v < vocab; ++v) {
      EXPECT_TRUE(std::isnan(g[static_cast<size_t>(v)])) << "row 0, logit " << v;
      EXPECT_TRUE(std::isfinite(g[static_cast<size_t>(vocab + v)])) << "row 1, logit " << v;
    }
  }
  std::vector<float> logits = {0.0f, -kInf, 0.0f};
  const std::vector<int32_t> target = {0};
  EXPECT_NEAR(cross_entropy_forward(3, logits, target, 1), std::log(2.0), 1e-12);
}

TEST(CrossEntropy, StableForHugeLogits) {
  std::vector<float> logits = {1e4f, 1e4f - 1.0f, -1e4f};
  const std::vector<int32_t> target = {1};
  const double want = std::log(std::exp(1.0) + 1.0);  // lse - l1, l0 = l1 + 1, l2 negligible
  EXPECT_NEAR(cross_entropy_forward(3, logits, target, 1), want, 1e-7);
  std::vector<float> g(3);
  cross_entropy_backward(3, logits, target, 1, 1.0f, g);
  for (float v : g) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(g[0] + g[1] + g[2], 0.0, 1e-6);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int64_t vocab = 9;
  auto logits = random_vector(4 * vocab, 2, -2.0f, 2.0f);
  const std::vector<int32_t> targets = {8, 0, 4, 4};
  const int64_t total = 10;  // this call is a shard of a 10-token batch
  const float dloss = 0.75f;
  auto loss = [&] { return dloss * cross_entropy_forward(vocab, logits, targets, total); };
  std::vector<float> g(logits.size());
  const double returned = cross_entropy_backward(vocab, logits, targets, total, dloss, g);
  EXPECT_EQ(returned, cross_entropy_forward(vocab, logits, targets, total));  // bitwise
  expect_grad_near(g, numeric_grad(logits, loss), 1e-3, "dlogits");
  // In place (dlogits aliasing logits) gives the same bits.
  std::vector<float> inplace = logits;
  cross_entropy_backward(vocab, inplace, targets, total, dloss, inplace);
  EXPECT_EQ(inplace, g);
}

TEST(CrossEntropy, ShardsWithGlobalCountSumToTheFullMean) {
  const int64_t vocab = 6, n = 7;
  const auto logits = random_vector(static_cast<size_t>(n * vocab), 3);
  const std::vector<int32_t> targets = {1, 5, 0, 2, 2, 3, 4};
  const double full = cross_entropy_forward(vocab, logits, targets, n);
  const std::span<const float> l(logits);
  const std::span<const int32_t> t(targets);
  const double a = cross_entropy_forward(vocab, l.first(3 * vocab), t.first(3), n);
  const double b = cross_entropy_forward(vocab, l.subspan(3 * vocab), t.subspan(3), n);
  EXPECT_NEAR(a + b, full, 1e-12);
  EXPECT_EQ(cross_entropy_forward(vocab, {}, {}, n), 0.0);  // an empty shard contributes 0
}

TEST(CrossEntropy, ArgumentErrors) {
  const std::vector<float> logits(8);
  const std::vector<int32_t> bad = {1, 4};
  EXPECT_THROW(cross_entropy_forward(4, logits, bad, 2), Error);
  const std::vector<int32_t> ok = {1, 3};
  EXPECT_THROW(cross_entropy_forward(4, logits, ok, 1), Error);  // total < N
  EXPECT_THROW(cross_entropy_forward(3, logits, ok, 2), Error);  // size
}

}  // namespace
}  // namespace cpattn::train
