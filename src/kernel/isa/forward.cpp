// One forward work item (FlashAttention-2, Dao 2023, Alg. 1) of the plan the driver made
// (kernel/forward.cpp): its lanes, <= kForwardMaxLanesPerItem (q tile, q head) pairs of one kv
// group, stream the k/v tiles they can see; each tile is packed once and every lane that sees it
// runs against it (GQA and q-tile reuse), with fp32 online softmax. bf16 calls on the AVX-512-BF16
// copy run the two products on vdpbf16ps (Bf16Products); every other call widens its operands to
// fp32 while packing (Fp32Products).
#include "kernel/isa/forward.h"

#include "kernel/isa/bf16_dot.h"
#include "kernel/isa/dropout.h"
#include "kernel/isa/gemm.h"
#include "kernel/isa/pack.h"
#include "kernel/isa/scores.h"
#include "kernel/isa/simd.h"

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

constexpr float kNegInf = -__builtin_inff();
constexpr float kLog2e = 1.44269504088896341f;  // fp32(log2 e)

void fill(float* x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

// Online softmax down the columns of S^T, kLanes queries per vector: with s_ji = score(raw_ji, j,
// c) (the scale, or the whole score transform of scores.h), m_new = max(m, max_j s_ji),
// s_ji <- exp(s_ji - m_new), l <- l * exp(m - m_new) + sum_j, and alpha = exp(m - m_new) for
// rescaling O. Each exp is taken as 2^((s - m_new) log2 e) (exp2_v, which needs no range
// reduction by ln 2): the difference is rounded before the multiply, so the multiply's rounding
// is relative to |s - m_new|, which is small for the terms that dominate the row (where scores
// carried log2 e themselves it would be relative to |s|: docs/performance.md), and m, l and lse
// stay in natural units. Masked scores are -inf and give exactly 0; a column that has seen only
// masked keys keeps m = -inf and subtracts 0 instead (no NaN). The running max skips NaN scores
// (vmax(s, mx) keeps mx when s is NaN) and stays NaN once m is, so every s - m_new and
// m - m_new is <= 0, -inf or NaN (what exp2_v takes); a NaN score still poisons its column
// through its own exp. Every step is lane-wise and runs down the keys in order, so the results
// do not depend on the lane count.
constexpr int kExpKeys = 4;  // keys per step of the exp pass: 8 exps in flight (simd.h)

template <class Score>
void softmax_columns(int64_t nk, int64_t nq_pad, const Score& score, float* st, float* m, float* l,
                     float* alpha) {
  const VF neg_inf = splat(kNegInf);
  for (int64_t c = 0; c < nq_pad; c += 2 * kLanes) {
    float* col = st + c;
    const VF m_old0 = load(m + c), m_old1 = load(m + c + kLanes);
    VF mx0 = m_old0, mx1 = m_old1;
    for (int64_t j = 0; j < nk; ++j) {
      const VF s0 = score(load(col + j * kForwardScoreStride), j, c);
      const VF s1 = score(load(col + j * kForwardScoreStride + kLanes), j, c + kLanes);
      store(col + j * kForwardScoreStride, s0);
      store(col + j * kForwardScoreStride + kLanes, s1);
      mx0 = vmax(s0, mx0);
      mx1 = vmax(s1, mx1);
    }
    const VF ref0 = mx0 == neg_inf ? VF{} : mx0;
    const VF ref1 = mx1 == neg_inf ? VF{} : mx1;
    VF sum0{}, sum1{};
    // Keys j .. j + R - 1: their 2 R exps run interleaved (exp2_v of an array), the sums still
    // take them in key order.
    const auto exp_keys = [&]<int R>(int64_t j) {
      VF x[2 * R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        x[2 * r] = (load(col + (j + r) * kForwardScoreStride) - ref0) * kLog2e;
        x[2 * r + 1] = (load(col + (j + r) * kForwardScoreStride + kLanes) - ref1) * kLog2e;
      }
      exp2_v(x);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        store(col + (j + r) * kForwardScoreStride, x[2 * r]);
        store(col + (j + r) * kForwardScoreStride + kLanes, x[2 * r + 1]);
        sum0 += x[2 * r];
        sum1 += x[2 * r + 1];
      }
    };
    int64_t j = 0;
    for (; j + kExpKeys <= nk; j += kExpKeys) exp_keys.template operator()<kExpKeys>(j);
    for (; j < nk; ++j) exp_keys.template operator()<1>(j);
    const VF a0 = exp2_v((m_old0 - ref0) * kLog2e);
    const VF a1 = exp2_v((m_old1 - ref1) * kLog2e);
    store(l + c, load(l + c) * a0 + sum0);
    store(l + c + kLanes, load(l + c + kLanes) * a1 + sum1);
    store(m + c, mx0);
    store(m + c + kLanes, mx1);
    store(alpha + c, a0);
    store(alpha + c + kLanes, a1);
  }
}

// The plain scores: the scale only (no softcap, no ALiBi).
struct ScaledScore {
  VF scale;
  VF operator()(VF raw, int64_t /*j*/, int64_t /*c*/) const { return raw * scale; }
};
// Scores already computed in place (a partially visible tile, transformed before its mask).
struct ReadyScore {
  VF operator()(VF s, int64_t /*j*/, int64_t /*c*/) const { return s; }
};

// The item's start state of one head: empty (O = 0, m = -inf, l = 0), or, when the call resumes a
// SoftmaxCarry, the rows' O from out and m, l from the carry.
void load_state(const ForwardPlan& plan, int64_t b, int64_t h, const TileRange& qt, float* o,
                float* m, float* l) {
  const ForwardProblem& p = *plan.p;
  fill(o, kForwardTileQ * plan.dv_pad, 0.0f);
  fill(m, kForwardTileQ, kNegInf);
  fill(l, kForwardTileQ, 0.0f);
  if (!p.resume) return;
  const int64_t row0 = (b * p.Hq + h) * p.Sq + qt.begin;
  const int64_t sd = p.out.stride[3];
  for (int64_t i = 0; i < qt.size; ++i) {
    m[i] = p.row_max[static_cast<size_t>(row0 + i)];
    l[i] = p.row_sum[static_cast<size_t>(row0 + i)];
    if (p.Dv == 0) continue;  // out may have null data: no row address is formed
    const float* src = &p.out(b, qt.begin + i, h, 0);
    for (int64_t d = 0; d < p.Dv; ++d) o[i * plan.dv_pad + d] = src[d * sd];
  }
}

// The item's end: out_i = O_i / l_i, lse_i = m_i + ln l_i (rows that saw no key get 0 and -inf),
// rounded once to out's dtype (store_row), or, for a carry that does not finish, O, m and l as
// they are (out is then fp32: validate_forward). With a sink logit sigma (the head's), the
// normaliser gains exp(sigma) once, here where the row's softmax ends: m' = max(m, sigma),
// l' = l exp(m - m') + exp(sigma - m'), out_i = O_i exp(m - m') / l', lse_i = m' + ln l' (a row
// that saw no key gets out 0 and lse sigma).
void write_rows(const ForwardPlan& plan, int64_t b, int64_t h, const TileRange& qt, const float* o,
                const float* m, const float* l) {
  const ForwardProblem& p = *plan.p;
  const int64_t row0 = (b * p.Hq + h) * p.Sq + qt.begin;
  const bool sink = !p.sink.empty();
  const float sigma = sink ? p.sink[static_cast<size_t>(p.dropout_head_offset + h)] : 0.0f;
  for (int64_t i = 0; i < qt.size; ++i) {
    const float* src = o + i * plan.dv_pad;
    const size_t row = static_cast<size_t>(row0 + i);
    if (!p.finish) {
      store_row(p.out, b, qt.begin + i, h, src, 1.0f, false);
      p.row_max[row] = m[i];
      p.row_sum[row] = l[i];
    } else if (sink && !__builtin_isnan(l[i])) {
      const float m_sink = m[i] > sigma ? m[i] : sigma;
      const float kept = __builtin_expf(m[i] - m_sink);  // 0 for a row that saw no key
      const float l_sink = l[i] * kept + __builtin_expf(sigma - m_sink);
      store_row(p.out, b, qt.begin + i, h, src, kept / l_sink, false);
      p.lse[row] = m_sink + __builtin_logf(l_sink);
    } else if (l[i] > 0.0f || __builtin_isnan(l[i])) {  // NaN: a NaN input reached the row
      store_row(p.out, b, qt.begin + i, h, src, 1.0f / l[i], false);
      p.lse[row] = m[i] + __builtin_logf(l[i]);
    } else {
      store_zero_row(p.out, b, qt.begin + i, h);
      p.lse[row] = kNegInf;
    }
  }
}

// The item's two products on fp32 tiles: S^T = K Q^T (kr rows, q panels) and O = O * alpha + P V
// with P read through S^T (row stride 1, k stride kForwardScoreStride). Any dtype: packing widens
// it.
struct Fp32Products {
  static void pack_q(const ForwardProblem& p, TileRows t, float* qt) {
    pack_panels_transposed(p.q, t, 1.0f, qt);
  }
  static void pack_kv(const ForwardProblem& p, TileRows t, float* kr, float* vp) {
    pack_rows(p.k, t, 1.0f, kr, p.Dqk);
    pack_panels(p.v, t, vp);
  }
  static void scores(const ForwardProblem& p, int64_t nk, int64_t nq_pad, const float* kr,
                     const float* qt, float* st) {
    gemm_tile(nk, nq_pad, {kr, p.Dqk, 1}, {qt, p.Dqk}, st, kForwardScoreStride, false);
  }
  // On a ScoreBox (scores.h): its nk keys are rows of the V panels, which hold vp_rows each
  // (vp points at the box's first).
  static void add_pv(int64_t nq, int64_t nk, int64_t /*nq_pad*/, int64_t dv_pad, float* st,
                     const float* vp, int64_t vp_rows, const float* alpha, float* o) {
    gemm_tile(nq, dv_pad, {st, 1, kForwardScoreStride}, {vp, nk, vp_rows}, o, dv_pad, true, alpha);
  }
  static constexpr bool kRunsOnBoxes = true;
};

#if CPATTN_ISA_BF16_DOT
// The same products on bf16 pairs (bf16_dot.h): q, k, v are packed as their bits, and P is
// rounded to bf16 (nearest even) right before P V, as FlashAttention does on GPUs. The scratch
// arrays are the fp32 ones (pairs take at most as many bytes).
struct Bf16Products {
  static uint32_t* words(float* x) { return reinterpret_cast<uint32_t*>(x); }
  static const uint32_t* words(const float* x) { return reinterpret_cast<const uint32_t*>(x); }
  static void pack_q(const ForwardProblem& p, TileRows t, float* qt) {
    pack_pair_panels_transposed(p.q, t, words(qt));
  }
  static void pack_kv(const ForwardProblem& p, TileRows t, float* kr, float* vp) {
    pack_pair_rows(p.k, t, words(kr), k_pairs(p.Dqk));
    pack_pair_panels(p.v, t, words(vp));
  }
  static void scores(const ForwardProblem& p, int64_t nk, int64_t nq_pad, const float* kr,
                     const float* qt, float* st) {
    const int64_t k2 = k_pairs(p.Dqk);
    gemm_tile_bf16(nk, nq_pad, {words(kr), k2, 1}, {words(qt), k2}, st, kForwardScoreStride, false);
  }
  static void add_pv(int64_t nq, int64_t nk, int64_t nq_pad, int64_t dv_pad, float* st,
                     const float* vp, int64_t /*vp_rows*/, const float* alpha, float* o) {
    const PairsA pt = pairs_down_rows(st, nk, nq_pad, kForwardScoreStride, words(st));
    gemm_tile_bf16(nq, dv_pad, pt, {words(vp), k_pairs(nk)}, o, dv_pad, true, alpha);
  }
  // Whole tiles only: a ScoreBox's keys would have to start at an even row (the pairs), which
  // this path does not arrange.
  static constexpr bool kRunsOnBoxes = false;
};
#endif

// One (q tile, q head) pair of an item: its packed Q^T and its running O, m, l in scratch.
struct Lane {
  const TileRange* qt;
  int64_t h;
  float *q_panels, *o, *m, *l;
};

template <class Products>
void run_item(const ForwardPlan& plan, int64_t item, float* scratch) {
  const ForwardProblem& p = *plan.p;
  const TileMask& mask = *plan.mask;
  const ForwardOffsets& at = plan.at;
  const int64_t chunk = item % plan.head_chunks;
  const int64_t g = item / plan.head_chunks % p.Hkv;
  const int64_t b = item / plan.head_chunks / p.Hkv % p.B;
  const int64_t first_tile = item / plan.head_chunks / p.Hkv / p.B * plan.tiles_per_item;
  const int64_t tiles_left = plan.n_q_tiles - first_tile;
  const int64_t n_tiles = plan.tiles_per_item < tiles_left ? plan.tiles_per_item : tiles_left;
  const int64_t h0 = g * p.group + chunk * plan.heads_per_item;
  const int64_t rest = p.group - chunk * plan.heads_per_item;
  const int64_t nh = plan.heads_per_item < rest ? plan.heads_per_item : rest;
  const int64_t dv_pad = plan.dv_pad;

  float* kr = scratch + at.kr;
  float* vp = scratch + at.vp;
  float* st = scratch + at.st;
  float* alpha = scratch + at.alpha;
  float* q_rel = scratch + at.q_rel;
  float* k_rel = scratch + at.k_rel;
  Lane lanes[kForwardMaxLanesPerItem];
  const int64_t n_lanes = n_tiles * nh;
  for (int64_t i = 0; i < n_lanes; ++i) {
    float* block = scratch + at.lanes + i * at.lane_stride;
    Lane& lane = lanes[i];
    lane = {&plan.q_tiles[plan.q_order[first_tile + i / nh]],
            h0 + i % nh,
            block + at.qt,
            block + at.o,
            block + at.m,
            block + at.l};
    Products::pack_q(p, {b, lane.h, lane.qt->begin, lane.qt->size}, lane.q_panels);
    load_state(plan, b, lane.h, *lane.qt, lane.o, lane.m, lane.l);
  }
  const DropoutTile dropout(p);

  // The k tiles some lane sees, in order; each lane skips those it does not.
  const auto seen = [&](int64_t t) {
    for (int64_t i = 0; i < n_lanes; i += nh) {
      if (mask.classify(*lanes[i].qt, plan.k_tiles[t]) != BlockVisibility::kHidden) return true;
    }
    return false;
  };
  const auto next_seen = [&](int64_t t) {
    while (t < plan.n_k_tiles && !seen(t)) ++t;
    return t;
  };
  for (int64_t t = next_seen(0); t < plan.n_k_tiles;) {
    const TileRange& kv = plan.k_tiles[t];
    const int64_t next = next_seen(t + 1);
    if (next < plan.n_k_tiles) {
      const TileRange& nkv = plan.k_tiles[next];
      prefetch_rows(p.k, {b, g, nkv.begin, nkv.size});
      prefetch_rows(p.v, {b, g, nkv.begin, nkv.size});
    }
    Products::pack_kv(p, {b, g, kv.begin, kv.size}, kr, vp);
    for (int64_t i = 0; i < n_lanes; ++i) {
      const Lane& lane = lanes[i];
      const TileRange& qt = *lane.qt;
      const BlockVisibility kind = mask.classify(qt, kv);
      if (kind == BlockVisibility::kHidden) continue;
      const int64_t nq_pad = round_up_nr(qt.size);
      // A partially visible tile runs on its visible box (scores.h): on a causal diagonal, not
      // the keys after its last query nor the queries before its first key.
      const ScoreBox box = Products::kRunsOnBoxes ? score_box(mask, qt, kv, kind)
                                                  : ScoreBox::whole(kv.size, qt.size);
      if (box.empty()) continue;
      const int64_t j0 = box.k_begin, j1 = box.k_end, c0 = box.c_begin, c1 = box.c_end;
      // Offsets in the fp32 layouts (Bf16Products runs whole tiles: j0 = c0 = 0).
      float* box_st = st + j0 * kForwardScoreStride + c0;
      Products::scores(p, j1 - j0, c1 - c0, kr + j0 * p.Dqk, lane.q_panels + c0 * p.Dqk, box_st);
      // The scores into the online softmax: fused into its first pass for fully visible tiles;
      // a partially visible tile gets its scores first, then the mask (so that masked -inf stays
      // -inf whatever the scale's sign or the transform).
      const auto into_softmax = [&](const auto& score) {
        if (kind == BlockVisibility::kPartial) {
          for (int64_t j = j0; j < j1; ++j) {
            float* row = st + j * kForwardScoreStride;
            for (int64_t c = c0; c < c1; c += kLanes) store(row + c, score(load(row + c), j, c));
          }
          for (int64_t r = c0; r < box.q_end; ++r) {
            mask.mask_keys(qt, qt.begin + r, kv, st + r, kForwardScoreStride);
          }
          softmax_columns(j1 - j0, c1 - c0, ReadyScore{}, box_st, lane.m + c0, lane.l + c0,
                          alpha + c0);
        } else {
          softmax_columns(kv.size, nq_pad, score, st, lane.m, lane.l, alpha);
        }
      };
      if (transforms_scores(p)) {
        with_score_map(p, lane.h, qt, nq_pad, kv, q_rel, k_rel, into_softmax);
      } else {
        into_softmax(ScaledScore{splat(p.scale)});
      }
      if (p.dropout_p > 0.0f) dropout.apply(b, lane.h, qt, kv, box.real(), st, kForwardScoreStride);
      // O = O * alpha + P V: the rescale happens as the product loads O.
      Products::add_pv(box.q_end - c0, j1 - j0, c1 - c0, dv_pad, box_st, vp + j0 * kNr, kv.size,
                       alpha + c0, lane.o + c0 * dv_pad);
    }
    t = next;
  }

  for (int64_t i = 0; i < n_lanes; ++i) {
    const Lane& lane = lanes[i];
    write_rows(plan, b, lane.h, *lane.qt, lane.o, lane.m, lane.l);
  }
}

}  // namespace

void forward_item(const ForwardPlan& plan, int64_t item, float* scratch) {
#if CPATTN_ISA_BF16_DOT
  if (plan.p->q.dtype == DType::kBF16) return run_item<Bf16Products>(plan, item, scratch);
#endif
  run_item<Fp32Products>(plan, item, scratch);
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
