// The scores of docs/design.md section 1 from the raw products <q_i, k_j> of a transposed score
// tile (keys as rows, queries as columns): s = scale * <q, k>, then softcap * tanh(s / softcap),
// then minus ALiBi's slope * |q_pos - k_pos|. One statement for the forward (which takes the
// scores into its online softmax) and the backward (which recomputes the forward's scores with the
// same operations, so P = exp(s - lse) matches, and also needs the cap's derivative).
#pragma once

#include <cstdint>

#include "kernel/isa/gemm.h"
#include "kernel/isa/simd.h"
#include "kernel/problem.h"
#include "kernel/tiles.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// The score transform of one (query tile, key tile, head), with softcap (kCap) and ALiBi
/// (kAlibi) compiled in or out. ALiBi's distances are taken from positions relative to the key
/// tile's smallest position, converted to float once per tile pair (q_rel, k_rel): exact while a
/// distance is below 2^24.
template <bool kCap, bool kAlibi>
struct ScoreMap {
  static constexpr bool kHasCap = kCap;
  VF scale, cap, inv_cap, half_scale_over_cap, slope;
  const float* q_rel;  ///< [columns] float(q_pos - base), 0 in padding columns
  const float* k_rel;  ///< [keys] float(k_pos - base)

  /// s of key row j, query columns c .. c + kLanes - 1, from their raw products (with a cap,
  /// softcap * tanh(2 raw (scale / (2 softcap))): the scale and the tanh's half angle in one
  /// multiply, the softcap folded into the tanh's numerator). Rounded (simd.h): the forward's
  /// and the backward's s have the same bits whatever the caller does with it.
  VF operator()(VF raw, int64_t j, int64_t c) const {
    VF s;
    if constexpr (kCap) {
      s = scaled_tanh_of_double_v(raw * half_scale_over_cap, cap);
    } else {
      s = raw * scale;
    }
    if constexpr (kAlibi) s = s - slope * abs_v(load(q_rel + c) - splat(k_rel[j]));
    return rounded(s);
  }
  /// The same s, and in `dcap` its derivative in the scaled score, 1 - tanh^2 (the backward's
  /// factor of dS; only with kCap).
  VF operator()(VF raw, int64_t j, int64_t c, VF& dcap) const {
    VF s;
    if constexpr (kCap) {
      s = scaled_tanh_of_double_v(raw * half_scale_over_cap, cap);  // the forward's bits
      const VF t = s * inv_cap;
      dcap = 1.0f - t * t;
    } else {
      s = raw * scale;
    }
    if constexpr (kAlibi) s = s - slope * abs_v(load(q_rel + c) - splat(k_rel[j]));
    return rounded(s);
  }
};

/// The part of a transposed score tile (keys as rows, queries as columns) that a tile pair's
/// products and softmax run on: key rows [k_begin, k_end) and query columns [c_begin, c_end) in
/// whole kNr-column panels, of which [c_begin, q_end) are real queries. A fully visible tile runs
/// whole; a partially visible one on its visible box (TileMask::visible_box), outside which
/// every score is masked: the key rows left out would add exp(-inf) = 0 to every sum, and the
/// query columns left out would keep their m, l and O (forward) or get nothing (backward).
struct ScoreBox {
  int64_t k_begin, k_end, c_begin, c_end, q_end;
  bool empty() const { return k_begin >= k_end || c_begin >= q_end; }
  /// The box's real queries and keys as a TileBox (what dropout draws for).
  TileBox real() const { return {c_begin, q_end, k_begin, k_end}; }
  /// The whole tile of nk keys and nq queries.
  static ScoreBox whole(int64_t nk, int64_t nq) { return {0, nk, 0, round_up_nr(nq), nq}; }
};

/// The ScoreBox of query tile q and key tile k, whose pair is of `kind` (not kHidden).
inline ScoreBox score_box(const TileMask& mask, const TileRange& q, const TileRange& k,
                          BlockVisibility kind) {
  if (kind != BlockVisibility::kPartial) return ScoreBox::whole(k.size, q.size);
  const TileBox b = mask.visible_box(q, k);
  if (b.empty()) return {0, 0, 0, 0, 0};
  const int64_t c_end = round_up_nr(b.q_end);
  return {b.k_begin, b.k_end, b.q_begin / kNr * kNr, c_end, c_end < q.size ? c_end : q.size};
}

/// Whether a call transforms its scores beyond the scale (softcap or ALiBi).
inline bool transforms_scores(const Problem& p) {
  return p.softcap > 0.0f || !p.alibi_slopes.empty();
}

/// Calls f(map) with the ScoreMap of query tile q (rows q.begin ..), key tile k and head h of the
/// call (ALiBi's slope is that of global head p.dropout_head_offset + h), instantiated for the
/// call's softcap and ALiBi; q_rel (>= columns floats) and k_rel (>= k.size floats) are scratch
/// it fills with the ALiBi distances' positions. For calls with neither, use the plain scale.
template <class F>
void with_score_map(const Problem& p, int64_t h, const TileRange& q, int64_t columns,
                    const TileRange& k, float* q_rel, float* k_rel, F&& f) {
  const bool cap = p.softcap > 0.0f;
  const bool alibi = !p.alibi_slopes.empty();
  float slope = 0.0f;
  if (alibi) {
    slope = p.alibi_slopes[static_cast<size_t>(p.dropout_head_offset + h)];
    const int64_t base = k.range.pos_min;
    for (int64_t i = 0; i < columns; ++i) {
      q_rel[i] =
          i < q.size ? static_cast<float>(p.q_pos[static_cast<size_t>(q.begin + i)] - base) : 0.0f;
    }
    for (int64_t j = 0; j < k.size; ++j) {
      k_rel[j] = static_cast<float>(p.k_pos[static_cast<size_t>(k.begin + j)] - base);
    }
  }
  const float c = cap ? p.softcap : 1.0f;
  const auto run = [&](auto map) {
    map.scale = splat(p.scale);
    map.cap = splat(c);
    map.inv_cap = splat(1.0f / c);
    map.half_scale_over_cap = splat(0.5f * p.scale / c);
    map.slope = splat(slope);
    map.q_rel = q_rel;
    map.k_rel = k_rel;
    f(map);
  };
  if (cap && alibi) {
    run(ScoreMap<true, true>{});
  } else if (cap) {
    run(ScoreMap<true, false>{});
  } else {
    run(ScoreMap<false, true>{});
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
