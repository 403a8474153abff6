// Text file loading, batch sampling and unigram entropy.
#include "train/data.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "cpattn/error.h"
#include "train/random.h"

namespace cpattn::train {

std::vector<uint8_t> read_text_file(const std::string& path, int64_t seq_len) {
  CPATTN_CHECK(seq_len >= 1, ErrorCode::kInvalidArgument, "seq_len must be >= 1, got ", seq_len);
  std::ifstream in(path, std::ios::binary);
  CPATTN_CHECK(in.is_open(), ErrorCode::kIo, "cannot open text file '", path,
               "': ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  std::array<char, 1 << 16> buf;
  while (in.read(buf.data(), buf.size()) || in.gcount() > 0) {
    bytes.insert(bytes.end(), buf.data(), buf.data() + in.gcount());
  }
  CPATTN_CHECK(!in.bad(), ErrorCode::kIo, "error reading text file '", path, "' after ",
               bytes.size(), " bytes");
  CPATTN_CHECK(!bytes.empty(), ErrorCode::kInvalidArgument, "text file '", path,
               "' is empty (0 bytes); need at least seq_len + 1 = ", seq_len + 1, " bytes");
  CPATTN_CHECK(static_cast<int64_t>(bytes.size()) >= seq_len + 1, ErrorCode::kInvalidArgument,
               "text file '", path, "' has ", bytes.size(),
               " bytes; need at least seq_len + 1 = ", seq_len + 1);
  return bytes;
}

BatchSampler::BatchSampler(std::span<const uint8_t> text, int64_t seq_len, int64_t batch,
                           uint64_t seed)
    : text_(text), seq_len_(seq_len), batch_(batch), seed_(seed) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(seq_len >= 1, kArg, "BatchSampler seq_len must be >= 1, got ", seq_len);
  CPATTN_CHECK(batch >= 1, kArg, "BatchSampler batch must be >= 1, got ", batch);
  CPATTN_CHECK(static_cast<int64_t>(text.size()) >= seq_len + 1, kArg, "BatchSampler: text has ",
               text.size(), " bytes; need at least seq_len + 1 = ", seq_len + 1);
}

Batch BatchSampler::sample(int64_t step) const {
  CPATTN_CHECK(step >= 0, ErrorCode::kInvalidArgument, "BatchSampler step must be >= 0, got ",
               step);
  Batch b;
  b.batch = batch_;
  b.seq_len = seq_len_;
  b.starts.resize(static_cast<size_t>(batch_));
  b.inputs.resize(static_cast<size_t>(batch_ * seq_len_));
  b.targets.resize(static_cast<size_t>(batch_ * seq_len_));
  // Two mixing rounds so that nearby (seed, step) pairs give unrelated streams.
  SplitMix64 rng(splitmix64_mix(seed_ ^ splitmix64_mix(static_cast<uint64_t>(step))));
  const auto choices = static_cast<uint64_t>(static_cast<int64_t>(text_.size()) - seq_len_);
  for (int64_t r = 0; r < batch_; ++r) {
    const auto start = static_cast<int64_t>(rng.next_below(choices));
    b.starts[static_cast<size_t>(r)] = start;
    for (int64_t s = 0; s < seq_len_; ++s) {
      const auto at = static_cast<size_t>(r * seq_len_ + s);
      b.inputs[at] = text_[static_cast<size_t>(start + s)];
      b.targets[at] = text_[static_cast<size_t>(start + s + 1)];
    }
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
