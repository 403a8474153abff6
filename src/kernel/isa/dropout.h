// Dropout multipliers of the contract in rng.h for a whole (q tile, k tile) block, generated from
// global positions only, so any sharding of the sequence reproduces the same mask.
#pragma once

#include <cstdint>

#include "kernel/problem.h"
#include "kernel/tiles.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// Z_ij = keep_ij / (1 - p) of docs/design.md section 4 (head h of the call draws the contract's
/// head dropout_head_offset + h of dropout_heads), in the transposed layout of the score
/// tiles: element (key j, query i) at x[j * ld + i]. Queries go in SIMD lanes (kLanes counters of
/// Philox4x32-10 at once, philox4x32_10_rounds of rng.h), and one Philox call serves every
/// consecutive key with the same k_pos / 4 (4 keys for contiguous positions). Integer and exact
/// float operations only: the same bits on every ISA.
class DropoutTile {
 public:
  explicit DropoutTile(const Problem& p);

  /// x[j * ld + i] = Z_ij for the key rows j in [box.k_begin, box.k_end) and the query columns i
  /// in [box.q_begin, round_up(box.q_end, kLanes)) of tiles q and k (box.q_begin a multiple of
  /// kLanes, box.q_end <= q.size); lanes past q.size get 0. x must hold round_up(q.size, kLanes)
  /// columns per key row.
  void fill(int64_t b, int64_t h, const TileRange& q, const TileRange& k, const TileBox& box,
            float* x, int64_t ld) const;
  /// x[j * ld + i] *= Z_ij likewise (lanes past q.size are multiplied by Z of counter 0).
  void apply(int64_t b, int64_t h, const TileRange& q, const TileRange& k, const TileBox& box,
             float* x, int64_t ld) const;

 private:
  template <bool kMultiply>
  void run(int64_t b, int64_t h, const TileRange& q, const TileRange& k, const TileBox& box,
           float* x, int64_t ld) const;
  RngState rng_;
  int64_t num_heads_q_;  // dropout's head coordinates (Problem::dropout_heads, _head_offset)
  int64_t head_offset_;
  float p_, inv_keep_;
  const int64_t* q_pos_;
  const int64_t* k_pos_;
};

}  // namespace cpattn::detail::CPATTN_ISA_NS
