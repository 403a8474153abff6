// Philox4x32-10 and the dropout-mask contract (docs/design.md section 4): a keep decision is a pure
// function of (seed, offset, batch, head, global q position, global k position).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace cpattn {

/// The RNG state one attention call consumes. Forward returns it; backward and recompute replay it.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const RngState&, const RngState&) = default;
};

/// "{seed=7, offset=3}": the one format of RngStates in messages.
std::string to_string(RngState rng);

/// Philox4x32-10 counter-based generator (Salmon et al., "Parallel Random Numbers: As Easy as
/// 1, 2, 3", SC'11): 10 rounds, multipliers 0xD2511F53 / 0xCD9E8D57, Weyl key increments
/// 0x9E3779B9 / 0xBB67AE85. Matches the Random123 known-answer vectors.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// The ten rounds of Philox4x32-10 on any lane type, the one statement of them: U is uint32_t
/// (philox4x32_10) or a vector of uint32 lanes (the kernel's dropout, one counter per lane).
/// (c0, c1, c2, c3) is the counter, replaced by the output; (k0, k1) the key;
/// mul_hi_lo(a, M, hi, lo) sets hi and lo to the high and low words of every lane's 64-bit
/// product a * M. Each round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2,
/// c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}; then the key is bumped by the Weyl constants.
template <typename U, typename MulHiLo>
inline void philox4x32_10_rounds(U& c0, U& c1, U& c2, U& c3, U k0, U k1, MulHiLo mul_hi_lo) {
  for (int round = 0; round < 10; ++round) {
    U hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, 0xD2511F53u, hi0, lo0);
    mul_hi_lo(c2, 0xCD9E8D57u, hi1, lo1);
    const U n0 = hi1 ^ c1 ^ k0;
    const U n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;  // golden ratio
    k1 += 0xBB67AE85u;  // sqrt(3) - 1
  }
}

/// The Philox key and the counter words of the dropout contract for one (b, h, q position).
/// key = {lo32(seed), hi32(seed) ^ hi32(offset)};
/// counter = {lo32(k_pos / 4), lo32(q_pos), b * num_heads_q + h, lo32(offset)}: the division comes
/// first, so masks repeat with period 2^32 in q_pos and 2^34 in k_pos.
struct DropoutStream {
  std::array<uint32_t, 2> key;
  uint32_t q_word;       ///< counter[1] = lo32(q_pos)
  uint32_t head_word;    ///< counter[2] = b * Hq + h
  uint32_t offset_word;  ///< counter[3] = lo32(offset)
};
DropoutStream dropout_stream(RngState rng, int64_t b, int64_t h, int64_t num_heads_q,
                             int64_t q_pos);

/// The uint32 lane r of element (b, h, q_pos, k_pos):
/// r = Philox4x32_10({k_pos/4, q_pos, b*Hq+h, lo32(offset)}, key)[k_pos % 4].
uint32_t dropout_bits(RngState rng, int64_t b, int64_t h, int64_t num_heads_q, int64_t q_pos,
                      int64_t k_pos);

/// u = (r >> 8) * 2^-24, an exact float in [0, 1).
inline float dropout_uniform(uint32_t r) { return static_cast<float>(r >> 8) * 0x1.0p-24f; }

/// keep = u >= dropout_p. With dropout_p = 0 every element is kept.
inline bool dropout_keep(uint32_t r, float dropout_p) { return dropout_uniform(r) >= dropout_p; }

}  // namespace cpattn
