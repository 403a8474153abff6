// Philox4x32-10 (Salmon et al., SC'11) and the dropout contract's counter/key mapping.
#include <cstddef>

#include "cpattn/rng.h"

namespace cpattn {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  philox4x32_10_rounds(c[0], c[1], c[2], c[3], k[0], k[1],
                       [](uint32_t a, uint32_t m, uint32_t& hi, uint32_t& lo) {
                         const uint64_t product = static_cast<uint64_t>(m) * a;
                         hi = static_cast<uint32_t>(product >> 32);
                         lo = static_cast<uint32_t>(product);
                       });
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
