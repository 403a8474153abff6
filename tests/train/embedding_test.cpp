// Embedding gather and its scatter-add backward (repeated tokens sum), and token range errors.
#include "train/embedding.h"

#include <gtest/gtest.h>

#include "cpattn/error.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

using namespace testing;  // grad_check.h: numeric gradients, random inputs

TEST(Embedding, ForwardGathersRows) {
  const int64_t vocab = 5, d = 3;
  const auto table = random_vector(static_cast<size_t>(vocab * d), 1);
  const std::vector<int32_t> tokens = {4, 0, 4, 2};
  std::vector<float> out(tokens.size() * d);
  embedding_forward(vocab, d, tokens, table, out);
  for (size_t r = 0; r < tokens.size(); ++r) {
    for (int64_t i = 0; i < d; ++i) EXPECT_EQ(out[r * d + i], table[tokens[r] * d + i]);
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const int64_t vocab = 7, d = 4;
  auto table = random_vector(static_cast<size_t>(vocab * d), 2);
  const std::vector<int32_t> tokens = {3, 3, 0, 6, 3, 1};
  const auto w = random_vector(tokens.size() * d, 3);
  std::vector<float> out(w.size());
  auto loss = [&] {
    embedding_forward(vocab, d, tokens, table, out);
    return weighted_sum(out, w);
  };
  std::vector<float> dtable(table.size(), 0.0f);
  embedding_backward(vocab, d, tokens, w, dtable);
  expect_grad_near(dtable, numeric_grad(table, loss), 1e-4, "dtable");
  for (int64_t i = 0; i < d; ++i) EXPECT_EQ(dtable[2 * d + i], 0.0f);  // unused token
}

TEST(Embedding, TokenOutOfRangeNamesRowAndId) {
  const std::vector<float> table(12);
  std::vector<float> out(6);
  const std::vector<int32_t> tokens = {1, 4};
  try {
    embedding_forward(4, 3, tokens, table, out);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "embedding_forward: token 4 at row 1 is outside [0, 4)");
  }
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(
      embedding_backward(4, 3, negative, std::span(out).first(3), std::span<float>(out).first(3)),
      Error);
}

}  // namespace
}  // namespace cpattn::train
