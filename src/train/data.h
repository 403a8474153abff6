// Training data: a text file as bytes (the tokens of the byte-level model), a deterministic
// sampler of random (seq_len + 1)-byte windows, and the text's unigram entropy (a loss baseline).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cpattn::train {

/// The largest text accepted (1 GiB): every process holds the whole text in memory.
inline constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

/// Reads the whole file `path` as bytes (read_regular_file, train/files.h: a regular file of at
/// most kMaxTextBytes; a FIFO or device is refused without blocking). It must hold at least
/// seq_len + 1 bytes (one window of inputs plus the next-byte target). Throws Error(kIo) when the
/// file cannot be opened or read, Error(kInvalidArgument) when it is not a regular file, is too
/// large, empty or shorter than seq_len + 1 (the message names the file and both sizes) or when
/// seq_len < 1.
std::vector<uint8_t> read_text_file(const std::string& path, int64_t seq_len);

/// One batch of next-byte prediction: targets[b, s] = inputs[b, s + 1] of the same window.
struct Batch {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> starts;   ///< [B] window start offsets in the text
  std::vector<int32_t> inputs;   ///< [B, S] bytes text[start + s], s in [0, S)
  std::vector<int32_t> targets;  ///< [B, S] bytes text[start + s + 1]
};

/// Samples batches of windows of seq_len + 1 bytes at uniformly random starts in
/// [0, size - seq_len - 1]. Batch `step` is a pure function of (seed, step): every rank, and a
/// resumed run, draws the same batch without shared state. Holds a view of `text`, which must
/// outlive the sampler.
class BatchSampler {
 public:
  /// Throws Error(kInvalidArgument) when seq_len < 1, batch < 1 or text.size() < seq_len + 1.
  BatchSampler(std::span<const uint8_t> text, int64_t seq_len, int64_t batch, uint64_t seed);

  /// The batch of update `step` (>= 0; throws Error(kInvalidArgument) otherwise). Starts are
  /// drawn from SplitMix64 seeded with mix(seed, step), one per row in order.
  Batch sample(int64_t step) const;

 private:
  std::span<const uint8_t> text_;
  int64_t seq_len_;
  int64_t batch_;
  uint64_t seed_;
};

/// A fixed batch of `batch` windows of seq_len + 1 bytes spread evenly over `text` (used for the
/// held-out evaluation: the same windows at every evaluation, no randomness). Window r starts at
/// floor(r * (size - seq_len - 1) / max(1, batch - 1)). Throws Error(kInvalidArgument) when
/// seq_len < 1, batch < 1 or text.size() < seq_len + 1.
Batch evenly_spaced_batch(std::span<const uint8_t> text, int64_t seq_len, int64_t batch);

/// Unigram entropy of the byte distribution in nats: H = -sum_c p_c ln p_c, p_c = count_c / size.
/// A model that learned only byte frequencies reaches this loss; a trained model goes below.
/// Throws Error(kInvalidArgument) on empty text.
double unigram_entropy_nats(std::span<const uint8_t> text);

}  // namespace cpattn::train
