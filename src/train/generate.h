// `cpattn generate`: sampling text from a trained model, one byte at a time, with temperature and
// top-k, seeded. The model runs forward only with the whole context on one rank (cp=1, dropout
// off), through the same ops as the training forward (forward_logits).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "cpattn/communicator.h"
#include "train/checkpoint.h"
#include "train/model_params.h"

namespace cpattn::train {

/// How bytes are drawn.
struct SampleOptions {
  int64_t tokens = 200;      ///< bytes to generate (>= 0)
  double temperature = 1.0;  ///< >= 0: draw from softmax(logits / T); 0: always the most likely
  int64_t top_k = 0;         ///< draw only among the k most likely bytes (0: all)
  uint64_t seed = 0;         ///< the draws' SplitMix64 seed: same seed, same text
  int64_t context = 0;       ///< feed at most this many trailing bytes (0: all of them)
  int threads = 1;           ///< attention kernel threads
  std::chrono::milliseconds timeout = kDefaultCommTimeout;  ///< deadline of the one-rank group
};

/// Throws Error(kInvalidArgument) naming the value when: tokens < 0, temperature < 0 or not
/// finite, top_k < 0, context < 0, threads < 1.
void validate_sample_options(const SampleOptions& options);

/// The model's logits for the byte after `context` ([vocab], the last row of forward_logits over
/// the whole context on a one-rank group `comm`, dropout off). Throws Error(kInvalidArgument)
/// when the context is empty or holds a byte >= vocab.
std::vector<float> next_byte_logits(Communicator& comm, const ModelParams& params,
                                    std::span<const uint8_t> context, int threads);

/// The byte drawn from `logits` by one uniform u in [0, 1): temperature 0 gives the first
/// largest logit; otherwise p_i = softmax(logits / temperature) over the top_k largest logits
/// (all when top_k is 0 or >= vocab; ties broken by index), and the first i in order of
/// decreasing p whose cumulative p exceeds u. Throws Error(kInvalidArgument) on empty logits.
int64_t sample_index(std::span<const float> logits, double temperature, int64_t top_k, double u);

/// Generates options.tokens bytes after `prompt` (non-empty): each step feeds the last
/// options.context bytes of prompt + generated so far and draws one byte (sample_index with the
/// next SplitMix64(seed) uniform). Deterministic: equal weights, prompt and options give equal
/// bytes. Throws what validate_sample_options and next_byte_logits throw.
std::vector<uint8_t> generate_bytes(const ModelParams& params, std::span<const uint8_t> prompt,
                                    const SampleOptions& options);

/// The weights of a checkpoint as ModelParams (counted in process_memory()).
ModelParams checkpoint_params(const Checkpoint& checkpoint);

}  // namespace cpattn::train
