// The dropout-mask contract (docs/design.md section 4): src/rng against the vectors file, against
// the reference's independent Philox (rapidcheck), and the keep fraction over 10^6 draws.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "cpattn/rng.h"
#include "support/vectors.h"
#include "verify/reference.h"

namespace cpattn {
namespace {

TEST(DropoutContract, MaskSamplesMatchVectors) {
  const auto vectors = testing::load_vectors_json();
  const auto& samples = vectors["dropout_mask_samples"];
  ASSERT_EQ(samples.size(), 64u);
  for (const auto& s : samples) {
    const RngState rng{s["seed"].get<uint64_t>(), s["offset"].get<uint64_t>()};
    const int64_t b = s["b"], h = s["h"], hq = s["Hq"], i = s["i"], j = s["j"];
    const uint32_t expected = s["r"].get<uint32_t>();
    const uint32_t r = dropout_bits(rng, b, h, hq, i, j);
    EXPECT_EQ(r, expected) << s.dump();
    EXPECT_EQ(reference::dropout_bits(rng, b, h, hq, i, j), expected) << s.dump();
    EXPECT_EQ(dropout_keep(r, 0.1f), s["keep_p0.1"].get<bool>()) << s.dump();
    EXPECT_EQ(dropout_keep(r, 0.5f), s["keep_p0.5"].get<bool>()) << s.dump();
    EXPECT_EQ(reference::dropout_keep(rng, b, h, hq, i, j, 0.1f), s["keep_p0.1"].get<bool>());
    EXPECT_EQ(reference::dropout_keep(rng, b, h, hq, i, j, 0.5f), s["keep_p0.5"].get<bool>());
  }
}

TEST(DropoutContract, UniformIsExactAndBelowOne) {
  EXPECT_EQ(dropout_uniform(0u), 0.0f);
  EXPECT_EQ(dropout_uniform(0xFFFFFFFFu), 1.0f - 0x1.0p-24f);
  EXPECT_EQ(dropout_uniform(0x00000100u), 0x1.0p-24f);
  EXPECT_TRUE(dropout_keep(0u, 0.0f));  // p = 0 keeps everything, even u = 0
  EXPECT_FALSE(dropout_keep(0u, 0x1.0p-24f));
}

RC_GTEST_PROP(DropoutContract, BitsMatchIndependentImplementation,
              (uint64_t seed, uint64_t offset)) {
  const int64_t hq = *rc::gen::inRange<int64_t>(1, 129);
  const int64_t h = *rc::gen::inRange<int64_t>(0, hq);
  const int64_t b = *rc::gen::inRange<int64_t>(0, 64);
  // Positions up to 2^40: beyond 32 bits the contract takes them mod 2^32 (j / 4 before that).
  const int64_t i = *rc::gen::inRange<int64_t>(0, int64_t{1} << 40);
  const int64_t j = *rc::gen::inRange<int64_t>(0, int64_t{1} << 40);
  const RngState rng{seed, offset};
  const uint32_t r = dropout_bits(rng, b, h, hq, i, j);
  RC_ASSERT(r == reference::dropout_bits(rng, b, h, hq, i, j));
  // The stream form the kernel uses for a whole row gives the same lane.
  const DropoutStream s = dropout_stream(rng, b, h, hq, i);
  const auto lanes =
      philox4x32_10({static_cast<uint32_t>(j / 4), s.q_word, s.head_word, s.offset_word}, s.key);
  RC_ASSERT(lanes[static_cast<size_t>(j % 4)] == r);
  const float p = *rc::gen::element(0.0f, 0.1f, 0.5f, 0.9f);
  RC_ASSERT(dropout_keep(r, p) == reference::dropout_keep(rng, b, h, hq, i, j, p));
}

// 1024 x 1024 = 1,048,576 draws per p: the binomial standard deviation of the kept fraction is
// <= 0.0005, so 0.005 is a 10-sigma bound that still catches any bias in the bit mapping.
class DropoutKeepFraction : public ::testing::TestWithParam<float> {};

TEST_P(DropoutKeepFraction, WithinHalfPercentOfOneMinusP) {
  const float p = GetParam();
  const RngState rng{0x1234567890ABCDEFull, 0x0000000500000003ull};
  int64_t kept = 0, total = 0;
  for (int64_t i = 0; i < 1024; ++i) {
    for (int64_t j = 0; j < 1024; ++j) {
      kept += dropout_keep(dropout_bits(rng, i % 3, i % 5, 8, 3 * i + 11, j), p) ? 1 : 0;
      ++total;
    }
  }
  const double fraction = static_cast<double>(kept) / static_cast<double>(total);
  EXPECT_NEAR(fraction, 1.0 - static_cast<double>(p), 0.005) << "over " << total << " draws";
}

INSTANTIATE_TEST_SUITE_P(Probabilities, DropoutKeepFraction, ::testing::Values(0.1f, 0.5f),
                         [](const auto& p) { return p.param == 0.1f ? "p0p1" : "p0p5"; });

}  // namespace
}  // namespace cpattn
