// Philox4x32-10 (Salmon et al., SC'11) and the dropout contract's counter/key mapping.
#include <cstddef>

#include "cpattn/rng.h"

namespace cpattn {

namespace {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    // One Philox round: two 32x32->64 multiplies, the high halves mixed with the other words.
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kPhiloxW0;
    k[1] += kPhiloxW1;
  }
  return c;
}

std::string to_string(RngState rng) {
  return "{seed=" + std::to_string(rng.seed) + ", offset=" + std::to_string(rng.offset) + "}";
}

DropoutStream dropout_stream(RngState rng, int64_t b, int64_t h, int64_t num_heads_q,
                             int64_t q_pos) {
  DropoutStream s;
  s.key = {static_cast<uint32_t>(rng.seed),
           static_cast<uint32_t>(rng.seed >> 32) ^ static_cast<uint32_t>(rng.offset >> 32)};
  s.q_word = static_cast<uint32_t>(q_pos);
  s.head_word = static_cast<uint32_t>(b * num_heads_q + h);
  s.offset_word = static_cast<uint32_t>(rng.offset);
  return s;
}

uint32_t dropout_bits(RngState rng, int64_t b, int64_t h, int64_t num_heads_q, int64_t q_pos,
                      int64_t k_pos) {
  const DropoutStream s = dropout_stream(rng, b, h, num_heads_q, q_pos);
  const auto out = philox4x32_10(
      {static_cast<uint32_t>(k_pos / 4), s.q_word, s.head_word, s.offset_word}, s.key);
  return out[static_cast<std::size_t>(k_pos % 4)];
}

}  // namespace cpattn
