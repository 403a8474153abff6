// Shared inputs of the training-job tests (trainer, resume, generate): a learnable word text and
// a tiny run configuration that trains in milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace cpattn::train::testing {

/// A few thousand bytes of English-like text (random words from a small list): learnable in tens
/// of steps.
inline std::vector<uint8_t> training_text() {
  const std::vector<std::string> words = {"the ", "cat ", "sat ", "on ", "a ",  "mat. ",
                                          "and ", "dog ", "ran ", "to ", "it. "};
  std::string s;
  uint32_t x = 1;
  while (s.size() < 4000) {
    x = x * 1664525u + 1013904223u;
    s += words[(x >> 24) % words.size()];
  }
  return {s.begin(), s.end()};
}

/// Two layers, d_model 24, 3 query heads / 1 kv head, 2 sequences of 37 tokens, dropout 0.1,
/// one step (tests set cp, steps and the rest).
inline TrainConfig tiny_config() {
  TrainConfig c;
  c.model.layers = 2;
  c.model.d_model = 24;
  c.model.heads = 3;
  c.model.kv_heads = 1;
  c.seq_len = 37;
  c.batch = 2;
  c.steps = 1;
  c.dropout = 0.1f;
  c.seed = 11;
  return c;
}

}  // namespace cpattn::train::testing
