// Dropout multipliers of a tile (dropout.h).
#include "kernel/isa/dropout.h"

#include "cpattn/rng.h"
#include "kernel/isa/simd.h"

namespace cpattn::detail::CPATTN_ISA_NS {

DropoutTile::DropoutTile(const Problem& p)
    : rng_(p.rng),
      num_heads_q_(p.dropout_heads),
      head_offset_(p.dropout_head_offset),
      p_(p.dropout_p),
      inv_keep_(1.0f / (1.0f - p.dropout_p)),
      q_pos_(p.q_pos.data()),
      k_pos_(p.k_pos.data()) {}

void DropoutTile::fill(int64_t b, int64_t h, const TileRange& q, const TileRange& k,
                       const TileBox& box, float* x, int64_t ld) const {
  run<false>(b, h, q, k, box, x, ld);
}

void DropoutTile::apply(int64_t b, int64_t h, const TileRange& q, const TileRange& k,
                        const TileBox& box, float* x, int64_t ld) const {
  run<true>(b, h, q, k, box, x, ld);
}

template <bool kMultiply>
void DropoutTile::run(int64_t b, int64_t h, const TileRange& q, const TileRange& k,
                      const TileBox& box, float* x, int64_t ld) const {
  // The stream words of dropout_stream (rng.h) that do not depend on the query.
  const DropoutStream s = dropout_stream(rng_, b, head_offset_ + h, num_heads_q_, 0);
  const VU key0 = VU{} + s.key[0], key1 = VU{} + s.key[1];
  const VU head = VU{} + s.head_word, offset = VU{} + s.offset_word;
  const VF keep_value = splat(inv_keep_), p = splat(p_);
  const int64_t* kp = k_pos_ + k.begin;
  for (int64_t i0 = box.q_begin; i0 < box.q_end; i0 += kLanes) {
    VU q_word{};  // lo32(q_pos) of each lane's query (0 past the tile)
    VI live{};    // all ones for lanes of real queries
    for (int l = 0; l < kLanes; ++l) {
      if (i0 + l >= q.size) break;
      q_word[l] = static_cast<uint32_t>(q_pos_[q.begin + i0 + l]);
      live[l] = -1;
    }
    int64_t block = -1;  // k_pos / 4 of the Philox outputs in r; -1 = none yet
    VU r[4] = {};
    for (int64_t j = box.k_begin; j < box.k_end; ++j) {
      const int64_t pos = kp[j];
      if (pos / 4 != block) {
        block = pos / 4;
        r[0] = VU{} + static_cast<uint32_t>(block);
        r[1] = q_word;
        r[2] = head;
        r[3] = offset;
        philox4x32_10_rounds(r[0], r[1], r[2], r[3], key0, key1,
                             [](VU a, uint32_t m, VU& hi, VU& lo) { mul_hi_lo(a, m, hi, lo); });
      }
      // u = (r >> 8) * 2^-24 (dropout_uniform: exact, < 2^24 fits the int conversion), keep = u >=
      // p.
      const VF u =
          __builtin_convertvector(__builtin_bit_cast(VI, r[pos % 4] >> 8), VF) * 0x1.0p-24f;
      const VI keep = u >= p;
      float* row = x + j * ld + i0;
      if (kMultiply) {
        store(row, load(row) * as_float(as_int(keep_value) & keep));
      } else {
        store(row, as_float(as_int(keep_value) & keep & live));
      }
    }
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
