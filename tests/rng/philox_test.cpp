// Philox4x32-10 against the Random123 known answers of tests/data/cpattn_vectors.json, and
// src/rng against the reference's independent implementation on random counters and keys.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "cpattn/rng.h"
#include "support/vectors.h"
#include "verify/reference.h"

namespace cpattn {
namespace {

TEST(Philox, RandomKnownAnswers) {
  const auto vectors = testing::load_vectors_json();
  ASSERT_EQ(vectors["philox4x32_10_kat"].size(), 3u);
  for (const auto& kat : vectors["philox4x32_10_kat"]) {
    const auto out = philox4x32_10(kat["counter"].get<std::array<uint32_t, 4>>(),
                                   kat["key"].get<std::array<uint32_t, 2>>());
    const auto expected = kat["output"].get<std::array<uint32_t, 4>>();
    EXPECT_EQ(out, expected);
  }
}

// The oracle's own Philox (verify/reference.h) must pass the same known answers.
TEST(Philox, ReferenceKnownAnswers) {
  const auto vectors = testing::load_vectors_json();
  ASSERT_EQ(vectors["philox4x32_10_kat"].size(), 3u);
  for (const auto& kat : vectors["philox4x32_10_kat"]) {
    const auto expected = kat["output"].get<std::array<uint32_t, 4>>();
    EXPECT_EQ(reference::philox4x32_10(kat["counter"].get<std::array<uint32_t, 4>>(),
                                       kat["key"].get<std::array<uint32_t, 2>>()),
              expected);
  }
}

RC_GTEST_PROP(Philox, MatchesIndependentImplementation,
              (uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1)) {
  RC_ASSERT(philox4x32_10({c0, c1, c2, c3}, {k0, k1}) ==
            reference::philox4x32_10({c0, c1, c2, c3}, {k0, k1}));
}

}  // namespace
}  // namespace cpattn
