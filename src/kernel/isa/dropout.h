// Dropout multipliers of the contract in rng.h, generated per (query row, key tile) from global
// positions only, so any sharding of the sequence reproduces the same mask.
#pragma once

#include <cstdint>

#include "kernel/problem.h"
#include "kernel/tiles.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// Z_ij = keep_ij / (1 - p) of docs/design.md section 4 for the keys of one tile.
class DropoutRow {
 public:
  explicit DropoutRow(const Problem& p);

  /// z[j] = (u_ij >= p ? 1 / (1 - p) : 0) for j < k.size, where u_ij comes from
  /// r = Philox4x32_10({k_pos / 4, q_pos, b * Hq + h, lo32(offset)}, key)[k_pos % 4]. One Philox
  /// call serves every consecutive key with the same k_pos / 4 (4 keys for contiguous positions).
  void fill(int64_t b, int64_t h, int64_t q_index, const TileRange& k, float* z) const;

 private:
  RngState rng_;
  int64_t num_heads_q_;
  float p_, inv_keep_;
  const int64_t* q_pos_;
  const int64_t* k_pos_;
};

}  // namespace cpattn::detail::CPATTN_ISA_NS
