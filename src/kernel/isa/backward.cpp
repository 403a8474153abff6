// One backward work item (FlashAttention-2, Dao 2023, Alg. 2) of the plan the driver made
// (kernel/backward.cpp): an item (batch, kv head, k-tile chunk) owns the dk/dv rows of its k tiles
// (summed over the GQA group) and adds its dq contributions to dq (one chunk) or to its chunk's
// partial rows. It runs a head's q tiles in lanes of up to kBackwardMaxLanes (tile_plan.h), each
// k tile packed once for all of them. bf16 calls on the AVX-512-BF16 copy run all five products on
// vdpbf16ps: S^T = K Q^T and dP^T = V dO^T take the bf16 inputs as they are; dV += (Z P)^T dO, dK
// += dS^T Q and dQ += dS K round Z P and dS to bf16 first (once each, nearest even), as
// FlashAttention does.
#include "kernel/isa/backward.h"

#include <algorithm>
#include <type_traits>

#include "kernel/isa/bf16_dot.h"
#include "kernel/isa/dropout.h"
#include "kernel/isa/gemm.h"
#include "kernel/isa/pack.h"
#include "kernel/isa/scores.h"
#include "kernel/isa/simd.h"

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

constexpr float kNegInf = -__builtin_inff();
constexpr float kPosInf = __builtin_inff();
constexpr int64_t kTileQ = kBackwardTileQ;
constexpr int64_t kTileK = kBackwardTileK;

void fill(float* x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

// A worker's scratch arrays (floats), carved at the plan's offsets (the driver's ScratchLayout,
// kernel/backward.cpp). Score-shaped tiles are transposed ([keys][queries]) so that K and V rows
// are the broadcast operands of S^T = K Q^T and dP^T = V dO^T, and per-query lse/D load as
// vectors along a row. The k tile's arrays are shared by the lanes; each lane (one q tile) has
// its own block (Lane).
struct Scratch {
  float* kr;     // [kTileK][Dqk]             K rows      (A of S^T)
  float* kp;     // [Dqk_pad/nr][nk][nr]      K panels    (B of dQ += dS K)
  float* vr;     // [kTileK][Dv]              V rows      (A of dP^T)
                 // (on the bf16 dot products kr and vr hold bf16 pair rows, kp pair panels,
                 // each half the size)
  float* st;     // [kTileK][kTileQ]          P^T (bf16 dot products: then its pairs for dV,
                 //                           then dS^T's pairs down its rows for dQ)
  float* dst;    // [kTileK][kTileQ]          dP^T, then scale * dS^T (bf16 dot products: then
                 //                           its pairs along its rows for dK)
  float* pzt;    // [kTileK][kTileQ]          (Z P)^T (dropout only; pairs for dV)
  float* dcap;   // [kTileK][kTileQ]          1 - tanh^2 of the softcap (softcap only)
  float* q_rel;  // [kTileQ]                  ALiBi positions (isa/scores.h)
  float* k_rel;  // [kTileK]
  float* dk;     // [chunk keys][Dqk_pad]     dK accumulators of the item's k tiles
  float* dv;     // [chunk keys][Dv_pad]      dV accumulators
};

// One lane's arrays: its q tile packed, its dQ accumulator and its rows' lse and D.
struct Lane {
  float* qt;        // [kTileQ/nr][Dqk][nr]      Q^T panels  (B of S^T = K Q^T)
  float* ot;        // [kTileQ/nr][Dv][nr]       dO^T panels (B of dP^T = V dO^T)
  float* qp;        // [Dqk_pad/nr][nq][nr]      Q panels    (B of dK += dS^T Q)
  float* op;        // [Dv_pad/nr][nq][nr]       dO panels   (B of dV += (Z P)^T dO)
                    // (on the bf16 dot products all four hold bf16 pair panels, half the size)
  float* dq;        // [kTileQ][Dqk_pad]         dQ accumulator of the q tile
  float* lse_safe;  // [kTileQ]                  lse, +inf for empty rows and padding
  float* dd;        // [kTileQ]                  D_i = <dout_i, out_i>
};

Scratch carve(const BackwardOffsets& o, float* f) {
  return {f + o.kr,   f + o.kp,    f + o.vr,    f + o.st, f + o.dst, f + o.pzt,
          f + o.dcap, f + o.q_rel, f + o.k_rel, f + o.dk, f + o.dv};
}

Lane carve_lane(const BackwardOffsets& o, float* f, int64_t lane) {
  float* l = f + o.lanes + lane * o.lane_stride;
  return {l + o.qt, l + o.ot, l + o.qp, l + o.op, l + o.dq, l + o.lse_safe, l + o.dd};
}

class Item {
 public:
  Item(const BackwardPlan& plan, float* scratch)
      : plan_(plan),
        p_(*plan.p),
        mask_(*plan.mask),
        dropout_(p_),
        w_(carve(plan.at, scratch)),
        scratch_(scratch),
        bf16_dot_(CPATTN_ISA_BF16_DOT && p_.q.dtype == DType::kBF16) {}

  // The item's heads one after the other, each head's q tiles in runs of plan.lanes: every k
  // tile of the chunk that a lane of the run sees is packed once, then runs against each lane
  // that sees it, in q tile order.
  void run(int64_t item) const {
    const int64_t chunks = plan_.chunks;
    const int64_t chunk = item % chunks;
    const int64_t g = item / chunks % p_.Hkv;
    const int64_t b = item / chunks / p_.Hkv;
    const int64_t n_kt = plan_.n_k_tiles;
    fill(w_.dk, plan_.tiles_per_chunk * kTileK * plan_.dqk_pad, 0.0f);
    fill(w_.dv, plan_.tiles_per_chunk * kTileK * plan_.dv_pad, 0.0f);
    Lane lanes[kBackwardMaxLanes];
    for (int64_t i = 0; i < plan_.lanes; ++i) lanes[i] = carve_lane(plan_.at, scratch_, i);
    for (int64_t h = g * p_.group; h < (g + 1) * p_.group; ++h) {
      for (int64_t q0 = 0; q0 < plan_.n_q_tiles; q0 += plan_.lanes) {
        const TileRange* q_tiles = plan_.q_tiles + q0;
        const int64_t n_lanes = std::min(plan_.lanes, plan_.n_q_tiles - q0);
        bool packed[kBackwardMaxLanes] = {};
        for (int64_t i = 0; i < n_lanes; ++i) fill(lanes[i].dq, kTileQ * plan_.dqk_pad, 0.0f);
        for (int64_t t = chunk; t < n_kt; t += chunks) {
          const TileRange& kv = plan_.k_tiles[t];
          BlockVisibility kinds[kBackwardMaxLanes];
          bool seen = false;
          for (int64_t i = 0; i < n_lanes; ++i) {
            kinds[i] = mask_.classify(q_tiles[i], kv);
            seen = seen || kinds[i] != BlockVisibility::kHidden;
          }
          if (!seen) continue;
          if (t + chunks < n_kt) {
            const TileRange& nkv = plan_.k_tiles[t + chunks];
            prefetch_rows(p_.k, {b, g, nkv.begin, nkv.size});
            prefetch_rows(p_.v, {b, g, nkv.begin, nkv.size});
          }
          pack_k_tile({b, g, kv.begin, kv.size});
          const int64_t local = (t / chunks) * kTileK;  // the k tile's rows in w.dk / w.dv
          for (int64_t i = 0; i < n_lanes; ++i) {
            if (kinds[i] == BlockVisibility::kHidden) continue;
            if (!packed[i]) {
              pack_q_tile(b, h, q_tiles[i], lanes[i]);
              packed[i] = true;
            }
            run_pair(b, h, q_tiles[i], kv, kinds[i], lanes[i], w_.dk + local * plan_.dqk_pad,
                     w_.dv + local * plan_.dv_pad);
          }
        }
        for (int64_t i = 0; i < n_lanes; ++i) write_dq(b, h, chunk, q_tiles[i], lanes[i]);
      }
    }
    before_dkdv_write(plan_);
    for (int64_t t = chunk; t < n_kt; t += chunks) {
      const int64_t local = (t / chunks) * kTileK;
      write_dkdv(b, g, plan_.k_tiles[t], w_.dk + local * plan_.dqk_pad,
                 w_.dv + local * plan_.dv_pad);
    }
  }

 private:
  void pack_q_tile(int64_t b, int64_t h, const TileRange& qt, const Lane& lane) const {
    const TileRows rows{b, h, qt.begin, qt.size};
    if (bf16_dot_) {
      pack_q_tile_pairs(rows, lane);
    } else {
      pack_panels_transposed(p_.q, rows, 1.0f, lane.qt);
      pack_panels_transposed(p_.dout, rows, 1.0f, lane.ot);
      pack_panels(p_.q, rows, lane.qp);
      pack_panels(p_.dout, rows, lane.op);
    }
    const int64_t row0 = (b * p_.Hq + h) * p_.Sq + qt.begin;
    for (int64_t i = 0; i < kTileQ; ++i) {
      const float lse = i < qt.size ? p_.lse[static_cast<size_t>(row0 + i)] : kNegInf;
      // Empty rows (lse = -inf) and padding columns must give P = 0: exp(s - (+inf)) = 0.
      lane.lse_safe[i] = lse == kNegInf ? kPosInf : lse;
      lane.dd[i] = i < qt.size ? plan_.delta[row0 + i] : 0.0f;
    }
  }

  // K rows and panels and V rows of the k tile, for every lane that sees it.
  void pack_k_tile(const TileRows& rows) const {
    if (bf16_dot_) {
      pack_k_tile_pairs(rows);
    } else {
      pack_rows(p_.k, rows, 1.0f, w_.kr, p_.Dqk);
      pack_panels(p_.k, rows, w_.kp);
      pack_rows(p_.v, rows, 1.0f, w_.vr, p_.Dv);
    }
  }

  // The five products of one (q tile, k tile) pair: dk, dv are the k tile's accumulators, the
  // q tile's dQ is the lane's. The fp32 products of a partially visible pair run on its visible
  // box (ScoreBox, scores.h): keys j in [j0, j1), query columns i in [c0, c1), real queries
  // [c0, q1); the queries left out add nothing to dK and dV, and the keys nothing to dQ.
  void run_pair(int64_t b, int64_t h, const TileRange& qt, const TileRange& kv,
                BlockVisibility kind, const Lane& lane, float* dk, float* dv) const {
    const int64_t nq = qt.size, nk = kv.size, nq_pad = round_up_nr(nq);
    const ScoreBox box = bf16_dot_ ? ScoreBox::whole(nk, nq) : score_box(mask_, qt, kv, kind);
    if (box.empty()) return;
    const int64_t j0 = box.k_begin, j1 = box.k_end, c0 = box.c_begin, c1 = box.c_end;
    const int64_t q1 = box.q_end;
    // The box's corner in the transposed score-shaped tiles.
    const int64_t at = j0 * kTileQ + c0;
    if (bf16_dot_) {
      score_products_bf16(nk, nq_pad, lane);
    } else {
      gemm_tile(j1 - j0, c1 - c0, {w_.kr + j0 * p_.Dqk, p_.Dqk, 1}, {lane.qt + c0 * p_.Dqk, p_.Dqk},
                w_.st + at, kTileQ, false);  // S^T
      gemm_tile(j1 - j0, c1 - c0, {w_.vr + j0 * p_.Dv, p_.Dv, 1}, {lane.ot + c0 * p_.Dv, p_.Dv},
                w_.dst + at, kTileQ, false);  // dP^T
    }
    // s - lse <= 0 exactly (P <= 1). s is rounded before the subtraction, as the forward rounded
    // it before subtracting its max (fused into one FMA, the unrounded product would miss lse
    // by up to half an ulp of the logit: P of a one-hot row's key 0.996 at logits of 8e4, and
    // above 0 by more than 88, where exp overflows, once |logits| ~ 1e11). Clamp at 0 all the
    // same (vmin(0, x) is x > 0 ? 0 : x; NaN stays: NaN > 0 is false). The exp below then only
    // sees x <= 0, -inf or NaN.
    const bool cap = p_.softcap > 0.0f;
    if (!transforms_scores(p_)) {
      const VF c = splat(p_.scale);
      for (int64_t j = j0; j < j1; ++j) {
        float* s = w_.st + j * kTileQ;
        for (int64_t i = c0; i < c1; i += kLanes) {
          const VF x = rounded(load(s + i) * c) - load(lane.lse_safe + i);
          store(s + i, vmin(VF{}, x));
        }
      }
    } else {
      // The forward's scores (scores.h), and the softcap's derivative for dS.
      with_score_map(p_, h, qt, nq_pad, kv, w_.q_rel, w_.k_rel, [&](const auto& score) {
        for (int64_t j = j0; j < j1; ++j) {
          float* s = w_.st + j * kTileQ;
          float* dcap = w_.dcap + j * kTileQ;
          for (int64_t i = c0; i < c1; i += kLanes) {
            VF d;
            const VF x = score(load(s + i), j, i, d) - load(lane.lse_safe + i);
            store(s + i, vmin(VF{}, x));
            if constexpr (std::decay_t<decltype(score)>::kHasCap) store(dcap + i, d);
          }
        }
      });
    }
    if (kind == BlockVisibility::kPartial) {
      for (int64_t i = c0; i < q1; ++i) mask_.mask_keys(qt, qt.begin + i, kv, w_.st + i, kTileQ);
    }
    const bool dropout = p_.dropout_p > 0.0f;
    if (dropout) {
      // Z^T into pzt (padding columns 0); the loop below turns it into (Z P)^T in place.
      dropout_.fill(b, h, qt, kv, box.real(), w_.pzt, kTileQ);
      for (int64_t j = j0; j < j1; ++j) fill(w_.pzt + j * kTileQ + nq, nq_pad - nq, 0.0f);
    }
    // P = exp(s - lse); dS = P (Z dP' - D) with dP' = dO V^T (Z enters dP and dV), times the
    // scale (and the softcap's derivative) for the products with the raw q and k.
    const VF scale = splat(p_.scale);
    for (int64_t j = j0; j < j1; ++j) {
      float* s = w_.st + j * kTileQ;
      float* ds = w_.dst + j * kTileQ;
      const float* dcap = w_.dcap + j * kTileQ;
      if (dropout) {
        float* pz = w_.pzt + j * kTileQ;
        for (int64_t i = c0; i < c1; i += kLanes) {
          const VF pr = exp_v<ExpInputs::kNonPositive>(load(s + i));
          const VF zz = load(pz + i);
          store(s + i, pr);
          store(pz + i, pr * zz);
          const VF d = pr * (load(ds + i) * zz - load(lane.dd + i)) * scale;
          store(ds + i, cap ? d * load(dcap + i) : d);
        }
      } else {
        for (int64_t i = c0; i < c1; i += kLanes) {
          const VF pr = exp_v<ExpInputs::kNonPositive>(load(s + i));
          store(s + i, pr);
          const VF d = pr * (load(ds + i) - load(lane.dd + i)) * scale;
          store(ds + i, cap ? d * load(dcap + i) : d);
        }
      }
    }
    if (bf16_dot_) {
      gradient_products_bf16(nq, nk, nq_pad, dropout ? w_.pzt : w_.st, lane, dk, dv);
      return;
    }
    const int64_t dqk_pad = plan_.dqk_pad, dv_pad = plan_.dv_pad;
    // dV += (Z P)^T dO and dK += dS^T Q: rows of the transposed tiles are the A rows, the box's
    // queries rows c0 .. q1 - 1 of the dO and Q panels (nq rows each).
    const PackedB op{lane.op + c0 * kNr, q1 - c0, nq}, qp{lane.qp + c0 * kNr, q1 - c0, nq};
    gemm_tile(j1 - j0, dv_pad, {(dropout ? w_.pzt : w_.st) + at, kTileQ, 1}, op, dv + j0 * dv_pad,
              dv_pad, true);
    gemm_tile(j1 - j0, dqk_pad, {w_.dst + at, kTileQ, 1}, qp, dk + j0 * dqk_pad, dqk_pad, true);
    // dQ += dS K, reading dS through dS^T (row stride 1, k stride kTileQ); the box's keys are
    // rows j0 .. j1 - 1 of the K panels (nk rows each).
    gemm_tile(q1 - c0, dqk_pad, {w_.dst + at, 1, kTileQ}, {w_.kp + j0 * kNr, j1 - j0, nk},
              lane.dq + c0 * dqk_pad, dqk_pad, true);
  }

#if CPATTN_ISA_BF16_DOT
  static uint32_t* words(float* x) { return reinterpret_cast<uint32_t*>(x); }
  // Q^T and dO^T (head dim as K) in qt and ot, Q and dO (queries as K) in qp and op, all as bf16
  // pair panels (pairs take at most the fp32 panels' bytes).
  void pack_q_tile_pairs(const TileRows& rows, const Lane& lane) const {
    pack_pair_panels_transposed(p_.q, rows, words(lane.qt));
    pack_pair_panels_transposed(p_.dout, rows, words(lane.ot));
    pack_pair_panels(p_.q, rows, words(lane.qp));
    pack_pair_panels(p_.dout, rows, words(lane.op));
  }
  // K and V rows as pairs in kr and vr (A of S^T and dP^T); K (keys as K) as pair panels in kp
  // (B of dQ).
  void pack_k_tile_pairs(const TileRows& rows) const {
    pack_pair_panels(p_.k, rows, words(w_.kp));
    pack_pair_rows(p_.k, rows, words(w_.kr), k_pairs(p_.Dqk));
    pack_pair_rows(p_.v, rows, words(w_.vr), k_pairs(p_.Dv));
  }
  // S^T = K Q^T and dP^T = V dO^T on vdpbf16ps.
  void score_products_bf16(int64_t nk, int64_t nq_pad, const Lane& lane) const {
    const int64_t k2 = k_pairs(p_.Dqk), v2 = k_pairs(p_.Dv);
    gemm_tile_bf16(nk, nq_pad, {words(w_.kr), k2, 1}, {words(lane.qt), k2}, w_.st, kTileQ, false);
    gemm_tile_bf16(nk, nq_pad, {words(w_.vr), v2, 1}, {words(lane.ot), v2}, w_.dst, kTileQ, false);
  }
  // dV += (Z P)^T dO, dK += dS^T Q and dQ += dS K on vdpbf16ps. zpt is (Z P)^T (P^T without
  // dropout), dst is dS^T; both become bf16 pairs in place (zpt along its rows for dV; dst down
  // its rows into st, whose P^T is spent by then, for dQ, then along its rows for dK). Padding
  // columns (queries past nq) hold 0 in both, so the zero high half of an odd nq's last pair
  // meets a 0.
  void gradient_products_bf16(int64_t nq, int64_t nk, int64_t nq_pad, float* zpt, const Lane& lane,
                              float* dk, float* dv) const {
    const int64_t dqk_pad = plan_.dqk_pad, dv_pad = plan_.dv_pad, q2 = k_pairs(nq);
    gemm_tile_bf16(nk, dv_pad, pairs_along_rows(zpt, nk, nq_pad, kTileQ), {words(lane.op), q2}, dv,
                   dv_pad, true);
    const PairsA ds = pairs_down_rows(w_.dst, nk, nq_pad, kTileQ, words(w_.st));
    gemm_tile_bf16(nk, dqk_pad, pairs_along_rows(w_.dst, nk, nq_pad, kTileQ), {words(lane.qp), q2},
                   dk, dqk_pad, true);
    gemm_tile_bf16(nq, dqk_pad, ds, {words(w_.kp), k_pairs(nk)}, lane.dq, dqk_pad, true);
  }
#else
  // Unreachable without the bf16 dot products (bf16_dot_ is false).
  void pack_q_tile_pairs(const TileRows&, const Lane&) const {}
  void pack_k_tile_pairs(const TileRows&) const {}
  void score_products_bf16(int64_t, int64_t, const Lane&) const {}
  void gradient_products_bf16(int64_t, int64_t, int64_t, float*, const Lane&, float*,
                              float*) const {}
#endif

  // dk/dv rows of one k tile: overwritten, or added to what dk/dv hold (accumulate without
  // overwrite_dkdv), rounded once to their dtype (store_row).
  void write_dkdv(int64_t b, int64_t g, const TileRange& kv, const float* dk,
                  const float* dv) const {
    const bool acc = p_.accumulate && !p_.overwrite_dkdv;
    for (int64_t j = 0; j < kv.size; ++j) {
      store_row(p_.dk, b, kv.begin + j, g, dk + j * plan_.dqk_pad, 1.0f, acc);
      store_row(p_.dv, b, kv.begin + j, g, dv + j * plan_.dv_pad, 1.0f, acc);
    }
  }

  // One chunk: the q tile's dq rows are complete and go straight to dq, as do chunk 0's when
  // chunk0_writes_dq. Otherwise they go to the chunk's partial rows (each written by exactly one
  // item) and the driver adds them up.
  void write_dq(int64_t b, int64_t h, int64_t chunk, const TileRange& qt, const Lane& lane) const {
    const int64_t dqk_pad = plan_.dqk_pad;
    const int64_t partial = chunk - (plan_.chunk0_writes_dq ? 1 : 0);
    if (plan_.chunks > 1 && partial >= 0) {
      float* part =
          plan_.dq_partial + (((partial * p_.B + b) * p_.Hq + h) * p_.Sq + qt.begin) * dqk_pad;
      for (int64_t e = 0; e < qt.size * dqk_pad; ++e) part[e] = lane.dq[e];
      return;
    }
    for (int64_t i = 0; i < qt.size; ++i) {
      store_row(p_.dq, b, qt.begin + i, h, lane.dq + i * dqk_pad, 1.0f, p_.accumulate);
    }
  }

  const BackwardPlan& plan_;
  const BackwardProblem& p_;
  const TileMask& mask_;
  DropoutTile dropout_;
  Scratch w_;
  float* scratch_;  ///< the worker's buffer, where the lanes' blocks are carved
  bool bf16_dot_;   ///< all five products on vdpbf16ps (a bf16 call on the AVX-512-BF16 copy)
};

}  // namespace

void backward_item(const BackwardPlan& plan, int64_t item, float* scratch) {
  Item(plan, scratch).run(item);
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
