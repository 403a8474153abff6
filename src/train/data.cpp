// Text file loading, batch sampling and unigram entropy.
#include "train/data.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "cpattn/error.h"
#include "train/files.h"
#include "train/random.h"

namespace cpattn::train {

std::vector<uint8_t> read_text_file(const std::string& path, int64_t seq_len) {
  CPATTN_CHECK(seq_len >= 1, ErrorCode::kInvalidArgument, "seq_len must be >= 1, got ", seq_len);
  const std::vector<uint8_t> bytes = read_regular_file(path, kMaxTextBytes, "text file");
  const uint64_t needed = static_cast<uint64_t>(seq_len) + 1;  // no overflow at INT64_MAX
  CPATTN_CHECK(!bytes.empty(), ErrorCode::kInvalidArgument, "text file '", path,
               "' is empty (0 bytes); need at least seq_len + 1 = ", needed, " bytes");
  CPATTN_CHECK(bytes.size() >= needed, ErrorCode::kInvalidArgument, "text file '", path, "' has ",
               bytes.size(), " bytes; need at least seq_len + 1 = ", needed);
  return bytes;
}

BatchSampler::BatchSampler(std::span<const uint8_t> text, int64_t seq_len, int64_t batch,
                           uint64_t seed)
    : text_(text), seq_len_(seq_len), batch_(batch), seed_(seed) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(seq_len >= 1, kArg, "BatchSampler seq_len must be >= 1, got ", seq_len);
  CPATTN_CHECK(batch >= 1, kArg, "BatchSampler batch must be >= 1, got ", batch);
  const uint64_t needed = static_cast<uint64_t>(seq_len) + 1;  // no overflow at INT64_MAX
  CPATTN_CHECK(text.size() >= needed, kArg, "BatchSampler: text has ", text.size(),
               " bytes; need at least seq_len + 1 = ", needed);
}

namespace {

// The window of row r starting at `start`: inputs text[start + s], targets text[start + s + 1].
void fill_window(Batch& b, std::span<const uint8_t> text, int64_t r, int64_t start) {
  b.starts[static_cast<size_t>(r)] = start;
  for (int64_t s = 0; s < b.seq_len; ++s) {
    const auto at = static_cast<size_t>(r * b.seq_len + s);
    b.inputs[at] = text[static_cast<size_t>(start + s)];
    b.targets[at] = text[static_cast<size_t>(start + s + 1)];
  }
}

Batch empty_batch(int64_t batch, int64_t seq_len) {
  Batch b;
  b.batch = batch;
  b.seq_len = seq_len;
  b.starts.resize(static_cast<size_t>(batch));
  b.inputs.resize(static_cast<size_t>(batch * seq_len));
  b.targets.resize(static_cast<size_t>(batch * seq_len));
  return b;
}

}  // namespace

Batch BatchSampler::sample(int64_t step) const {
  CPATTN_CHECK(step >= 0, ErrorCode::kInvalidArgument, "BatchSampler step must be >= 0, got ",
               step);
  Batch b = empty_batch(batch_, seq_len_);
  // Two mixing rounds so that nearby (seed, step) pairs give unrelated streams.
  SplitMix64 rng(splitmix64_mix(seed_ ^ splitmix64_mix(static_cast<uint64_t>(step))));
  const auto choices = static_cast<uint64_t>(static_cast<int64_t>(text_.size()) - seq_len_);
  for (int64_t r = 0; r < batch_; ++r) {
    fill_window(b, text_, r, static_cast<int64_t>(rng.next_below(choices)));
  }
  return b;
}

Batch evenly_spaced_batch(std::span<const uint8_t> text, int64_t seq_len, int64_t batch) {
  const BatchSampler check(text, seq_len, batch, 0);  // the same preconditions
  Batch b = empty_batch(batch, seq_len);
  const int64_t last_start = static_cast<int64_t>(text.size()) - seq_len - 1;
  const int64_t gaps = std::max<int64_t>(1, batch - 1);
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t start = r * last_start / gaps;  // no overflow: the text is at most 2^30 bytes
    fill_window(b, text, r, start);
  }
  return b;
}

double unigram_entropy_nats(std::span<const uint8_t> text) {
  CPATTN_CHECK(!text.empty(), ErrorCode::kInvalidArgument,
               "unigram_entropy_nats needs non-empty text");
  std::array<int64_t, 256> counts{};
  for (uint8_t c : text) ++counts[c];
  const auto total = static_cast<double>(text.size());
  double h = 0.0;
  for (int64_t n : counts) {
    if (n == 0) continue;
    const double p = static_cast<double>(n) / total;
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace cpattn::train
