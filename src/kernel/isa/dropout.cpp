// Per-row dropout multipliers (dropout.h).
#include "kernel/isa/dropout.h"

#include <array>

#include "cpattn/rng.h"

namespace cpattn::detail::CPATTN_ISA_NS {

DropoutRow::DropoutRow(const Problem& p)
    : rng_(p.rng),
      num_heads_q_(p.Hq),
      p_(p.dropout_p),
      inv_keep_(1.0f / (1.0f - p.dropout_p)),
      q_pos_(p.q_pos.data()),
      k_pos_(p.k_pos.data()) {}

void DropoutRow::fill(int64_t b, int64_t h, int64_t q_index, const TileRange& k, float* z) const {
  const DropoutStream s = dropout_stream(rng_, b, h, num_heads_q_, q_pos_[q_index]);
  const int64_t* kp = k_pos_ + k.begin;
  std::array<uint32_t, 4> bits{};
  int64_t block = -1;  // k_pos / 4 of the Philox output in `bits`; -1 = none yet
  for (int64_t j = 0; j < k.size; ++j) {
    const int64_t pos = kp[j];
    if (pos / 4 != block) {
      block = pos / 4;
      bits = philox4x32_10({static_cast<uint32_t>(block), s.q_word, s.head_word, s.offset_word},
                           s.key);
    }
    z[j] = dropout_keep(bits[static_cast<size_t>(pos % 4)], p_) ? inv_keep_ : 0.0f;
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
