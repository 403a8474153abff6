// Philox4x32-10 against the Random123 known answers of tests/data/cpattn_vectors.json.
#include <gtest/gtest.h>


#include "cpattn/rng.h"
#include "support/vectors.h"

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

}  // namespace
}  // namespace cpattn
