// Backward attention (FlashAttention-2, Dao 2023, Alg. 2) on CPU. Work items are (batch, kv head,
// k-tile chunk): an item owns the dk/dv rows of its k tiles (summed over the GQA group) and adds
// its dq contributions to a per-chunk fp32 partial buffer; the partials are summed in chunk
// order afterwards, so results are bitwise reproducible for a given thread count.
#include "kernel/backward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpattn/tensor.h"
#include "kernel/dropout.h"
#include "kernel/gemm.h"
#include "kernel/pack.h"
#include "kernel/parallel.h"
#include "kernel/scratch.h"
#include "kernel/simd.h"
#include "kernel/tiles.h"

namespace cpattn::detail {
namespace {

// Tile sizes: five products per (q tile, k tile) pair. Work items walk q tiles outside and k
// tiles inside, so the packed Q^T/dO^T/Q/dO of a q tile (transposes included) are made once per
// q tile and only plain row copies of K/V happen per pair; 64 x 64 keeps the pair's operands
// (S^T, dP^T/dS^T, Z P: 16 KiB each; packed Q/dO/K/V tiles: <= 32 KiB each at D = 128) in L2.
constexpr int64_t kTileQ = 64;
constexpr int64_t kTileK = 64;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Per-worker scratch (floats), one counted Tensor per worker, carved by the ScratchLayout of
// BackwardRunner::plan_scratch. Score-shaped tiles are transposed
// ([keys][queries]) so that K and V rows are the broadcast operands of S^T = K Q^T and
// dP^T = V dO^T, and per-query lse/D load as vectors along a row.
struct Scratch {
  float* qt;        // [kTileQ/16][Dqk][16]      Q^T panels  (B of S^T = K Q^T)
  float* ot;        // [kTileQ/16][Dv][16]       dO^T panels (B of dP^T = V dO^T)
  float* qp;        // [Dqk_pad/16][kTileQ][16]  Q panels    (B of dK += dS^T Q)
  float* op;        // [Dv_pad/16][kTileQ][16]   dO panels   (B of dV += (Z P)^T dO)
  float* dq;        // [kTileQ][Dqk_pad]         dQ accumulator of the q tile
  float* kr;        // [kTileK][Dqk]             K rows      (A of S^T)
  float* kp;        // [Dqk_pad/16][kTileK][16]  K panels    (B of dQ += dS K)
  float* vr;        // [kTileK][Dv]              V rows      (A of dP^T)
  float* st;        // [kTileK][kTileQ]          P^T
  float* dst;       // [kTileK][kTileQ]          dP^T, then scale * dS^T
  float* pzt;       // [kTileK][kTileQ]          (Z P)^T (dropout only)
  float* z;         // [kTileK]                  dropout multipliers of one query
  float* lse_safe;  // [kTileQ]             lse, +inf for empty rows and padding
  float* dd;        // [kTileQ]                  D_i = <dout_i, out_i>
  float* dk;        // [chunk keys][Dqk_pad]     dK accumulators of the item's k tiles
  float* dv;        // [chunk keys][Dv_pad]      dV accumulators
};

class BackwardRunner {
 public:
  explicit BackwardRunner(const BackwardProblem& p)
      : p_(p),
        mask_(p),
        dropout_(p),
        q_tiles_(make_tiles(p.q_pos, p.q_doc, kTileQ)),
        k_tiles_(make_tiles(p.k_pos, p.k_doc, kTileK)),
        dqk_pad_(round_up_nr(p.Dqk)),
        dv_pad_(round_up_nr(p.Dv)),
        // Enough (batch, kv head) items to keep every thread busy -> one chunk, and dq rows are
        // complete in one item; otherwise split each kv head's k tiles into num_threads
        // interleaved chunks (tile t goes to chunk t % chunks, which also balances causal work)
        // whose dq contributions meet in per-chunk partial buffers.
        chunks_(p.B * p.Hkv >= 4 * p.num_threads ? 1 : p.num_threads),
        tiles_per_chunk_((static_cast<int64_t>(k_tiles_.size()) + chunks_ - 1) / chunks_),
        at_(plan_scratch()),
        delta_(p.delta) {}

  void run() {
    if (delta_.empty()) compute_delta();
    if (chunks_ > 1) {
      dq_partial_ = Tensor({chunks_, p_.B, p_.Hq, p_.Sq, dqk_pad_});
      dq_part_ = dq_partial_.data();
    }
    const int64_t items = p_.B * p_.Hkv * chunks_;
    std::vector<Tensor> scratch(static_cast<size_t>(worker_count(items, p_.num_threads)));
    parallel_for(items, p_.num_threads, p_.interruption_point, [&](int64_t item, int worker) {
      Tensor& buf = scratch[static_cast<size_t>(worker)];
      if (buf.numel() == 0) buf = Tensor({layout_.total()});
      run_item(item, carve(buf.data()));
    });
    scratch.clear();
    if (chunks_ > 1) reduce_dq();
  }

 private:
  // The offsets of every Scratch array, from one ScratchLayout (sizes as in Scratch's comments).
  struct Offsets {
    int64_t qt, ot, qp, op, dq, kr, kp, vr, st, dst, pzt, z, lse_safe, dd, dk, dv;
  };
  Offsets plan_scratch() {
    Offsets o;
    o.qt = layout_.add(kTileQ * p_.Dqk);
    o.ot = layout_.add(kTileQ * p_.Dv);
    o.qp = layout_.add(kTileQ * dqk_pad_);
    o.op = layout_.add(kTileQ * dv_pad_);
    o.dq = layout_.add(kTileQ * dqk_pad_);
    o.kr = layout_.add(kTileK * p_.Dqk);
    o.kp = layout_.add(kTileK * dqk_pad_);
    o.vr = layout_.add(kTileK * p_.Dv);
    o.st = layout_.add(kTileK * kTileQ);
    o.dst = layout_.add(kTileK * kTileQ);
    o.pzt = layout_.add(kTileK * kTileQ);
    o.z = layout_.add(kTileK);
    o.lse_safe = layout_.add(kTileQ);
    o.dd = layout_.add(kTileQ);
    o.dk = layout_.add(tiles_per_chunk_ * kTileK * dqk_pad_);
    o.dv = layout_.add(tiles_per_chunk_ * kTileK * dv_pad_);
    return o;
  }

  Scratch carve(float* f) const {
    const Offsets& o = at_;
    return {f + o.qt, f + o.ot,  f + o.qp,  f + o.op, f + o.dq,       f + o.kr, f + o.kp, f + o.vr,
            f + o.st, f + o.dst, f + o.pzt, f + o.z,  f + o.lse_safe, f + o.dd, f + o.dk, f + o.dv};
  }

  // D_i = <dout_i, out_i> (FlashAttention-2 Alg. 2 line 4), fp32 [B, Hq, Sq].
  void compute_delta() {
    delta_storage_ = Tensor({p_.B, p_.Hq, p_.Sq});
    float* d = delta_storage_.data();
    parallel_for(p_.B * p_.Hq, p_.num_threads, p_.interruption_point, [&](int64_t bh, int) {
      const int64_t b = bh / p_.Hq, h = bh % p_.Hq;
      for (int64_t i = 0; i < p_.Sq; ++i) {
        float acc = 0.0f;
        for (int64_t c = 0; c < p_.Dv; ++c) acc += p_.dout(b, i, h, c) * p_.out(b, i, h, c);
        d[bh * p_.Sq + i] = acc;
      }
    });
    delta_ = delta_storage_.span();
  }

  void run_item(int64_t item, const Scratch& w) const {
    const int64_t chunk = item % chunks_;
    const int64_t g = item / chunks_ % p_.Hkv;
    const int64_t b = item / chunks_ / p_.Hkv;
    const int64_t n_kt = static_cast<int64_t>(k_tiles_.size());
    std::fill(w.dk, w.dk + tiles_per_chunk_ * kTileK * dqk_pad_, 0.0f);
    std::fill(w.dv, w.dv + tiles_per_chunk_ * kTileK * dv_pad_, 0.0f);
    for (int64_t h = g * p_.group; h < (g + 1) * p_.group; ++h) {
      for (const TileRange& qt : q_tiles_) {
        std::fill(w.dq, w.dq + kTileQ * dqk_pad_, 0.0f);
        bool packed = false;
        for (int64_t t = chunk; t < n_kt; t += chunks_) {
          const TileRange& kv = k_tiles_[static_cast<size_t>(t)];
          const BlockVisibility kind = mask_.classify(qt, kv);
          if (kind == BlockVisibility::kHidden) continue;
          if (!packed) {
            pack_q_tile(b, h, qt, w);
            packed = true;
          }
          if (t + chunks_ < n_kt) {
            const TileRange& nkv = k_tiles_[static_cast<size_t>(t + chunks_)];
            prefetch_rows(p_.k, {b, g, nkv.begin, nkv.size});
            prefetch_rows(p_.v, {b, g, nkv.begin, nkv.size});
          }
          const int64_t local = (t / chunks_) * kTileK;  // the k tile's rows in w.dk / w.dv
          run_pair(b, g, h, qt, kv, kind, w, w.dk + local * dqk_pad_, w.dv + local * dv_pad_);
        }
        write_dq(b, h, chunk, qt, w.dq);
      }
    }
    for (int64_t t = chunk; t < n_kt; t += chunks_) {
      const int64_t local = (t / chunks_) * kTileK;
      write_dkdv(b, g, k_tiles_[static_cast<size_t>(t)], w.dk + local * dqk_pad_,
                 w.dv + local * dv_pad_);
    }
  }

  void pack_q_tile(int64_t b, int64_t h, const TileRange& qt, const Scratch& w) const {
    const TileRows rows{b, h, qt.begin, qt.size};
    pack_panels_transposed(p_.q, rows, 1.0f, w.qt);
    pack_panels_transposed(p_.dout, rows, 1.0f, w.ot);
    pack_panels(p_.q, rows, w.qp);
    pack_panels(p_.dout, rows, w.op);
    const int64_t row0 = (b * p_.Hq + h) * p_.Sq + qt.begin;
    for (int64_t i = 0; i < kTileQ; ++i) {
      const float lse = i < qt.size ? p_.lse[static_cast<size_t>(row0 + i)] : kNegInf;
      // Empty rows (lse = -inf) and padding columns must give P = 0: exp(s - (+inf)) = 0.
      w.lse_safe[i] = lse == kNegInf ? kPosInf : lse;
      w.dd[i] = i < qt.size ? delta_[static_cast<size_t>(row0 + i)] : 0.0f;
    }
  }

  void run_pair(int64_t b, int64_t g, int64_t h, const TileRange& qt, const TileRange& kv,
                BlockVisibility kind, const Scratch& w, float* dk, float* dv) const {
    const int64_t nq = qt.size, nk = kv.size, nq_pad = round_up_nr(nq);
    const TileRows rows{b, g, kv.begin, nk};
    pack_rows(p_.k, rows, 1.0f, w.kr, p_.Dqk);
    pack_panels(p_.k, rows, w.kp);
    pack_rows(p_.v, rows, 1.0f, w.vr, p_.Dv);

    gemm_tile(nk, nq_pad, {w.kr, p_.Dqk, 1}, {w.qt, p_.Dqk}, w.st, kTileQ, false);  // S^T
    gemm_tile(nk, nq_pad, {w.vr, p_.Dv, 1}, {w.ot, p_.Dv}, w.dst, kTileQ, false);   // dP^T
    const V8 c = splat8(p_.scale);
    for (int64_t j = 0; j < nk; ++j) {
      float* s = w.st + j * kTileQ;
      for (int64_t i = 0; i < nq_pad; i += kLanes) {
        // s - lse <= 0 exactly (P <= 1), but rounding can push it above 0 (the forward rounded
        // scale * s before subtracting its max; here the two may fuse into one FMA): by more than
        // 88, where exp overflows, once |logits| ~ 1e11. Clamp at 0; NaN stays (NaN > 0 is false).
        const V8 x = load8(s + i) * c - load8(w.lse_safe + i);
        store8(s + i, x > V8{} ? V8{} : x);
      }
    }
    if (kind == BlockVisibility::kPartial) {
      for (int64_t i = 0; i < nq; ++i) mask_.mask_keys(qt.begin + i, kv, w.st + i, kTileQ);
    }
    const bool dropout = p_.dropout_p > 0.0f;
    if (dropout) {
      // Z^T into pzt (padding columns 0); the loop below turns it into (Z P)^T in place.
      for (int64_t i = 0; i < nq; ++i) {
        dropout_.fill(b, h, qt.begin + i, kv, w.z);
        for (int64_t j = 0; j < nk; ++j) w.pzt[j * kTileQ + i] = w.z[j];
      }
      for (int64_t j = 0; j < nk; ++j) {
        std::fill(w.pzt + j * kTileQ + nq, w.pzt + j * kTileQ + nq_pad, 0.0f);
      }
    }
    // P = exp(scale s - lse); dS = P (Z dP' - D) with dP' = dO V^T (Z enters dP and dV).
    const V8 scale = splat8(p_.scale);
    for (int64_t j = 0; j < nk; ++j) {
      float* s = w.st + j * kTileQ;
      float* ds = w.dst + j * kTileQ;
      if (dropout) {
        float* pz = w.pzt + j * kTileQ;
        for (int64_t i = 0; i < nq_pad; i += kLanes) {
          const V8 p = exp_8(load8(s + i));
          const V8 z = load8(pz + i);
          store8(s + i, p);
          store8(pz + i, p * z);
          store8(ds + i, p * (load8(ds + i) * z - load8(w.dd + i)) * scale);
        }
      } else {
        for (int64_t i = 0; i < nq_pad; i += kLanes) {
          const V8 p = exp_8(load8(s + i));
          store8(s + i, p);
          store8(ds + i, p * (load8(ds + i) - load8(w.dd + i)) * scale);
        }
      }
    }
    // dV += (Z P)^T dO and dK += dS^T Q: rows of the transposed tiles are the A rows.
    gemm_tile(nk, dv_pad_, {dropout ? w.pzt : w.st, kTileQ, 1}, {w.op, nq}, dv, dv_pad_, true);
    gemm_tile(nk, dqk_pad_, {w.dst, kTileQ, 1}, {w.qp, nq}, dk, dqk_pad_, true);
    // dQ += dS K, reading dS through dS^T (row stride 1, k stride kTileQ).
    gemm_tile(nq, dqk_pad_, {w.dst, 1, kTileQ}, {w.kp, nk}, w.dq, dqk_pad_, true);
  }

  void write_dkdv(int64_t b, int64_t g, const TileRange& kv, const float* dk,
                  const float* dv) const {
    const bool acc = p_.accumulate;
    for (int64_t j = 0; j < kv.size; ++j) {
      const float* sk = dk + j * dqk_pad_;
      for (int64_t d = 0; d < p_.Dqk; ++d) {
        float& dst = p_.dk(b, kv.begin + j, g, d);
        dst = acc ? dst + sk[d] : sk[d];
      }
      const float* sv = dv + j * dv_pad_;
      for (int64_t d = 0; d < p_.Dv; ++d) {
        float& dst = p_.dv(b, kv.begin + j, g, d);
        dst = acc ? dst + sv[d] : sv[d];
      }
    }
  }

  // One chunk: the q tile's dq rows are complete and go straight to dq. Several: they go to the
  // chunk's partial rows (each written by exactly one item) and reduce_dq sums them.
  void write_dq(int64_t b, int64_t h, int64_t chunk, const TileRange& qt, const float* dq) const {
    if (chunks_ > 1) {
      float* part = dq_part_ + (((chunk * p_.B + b) * p_.Hq + h) * p_.Sq + qt.begin) * dqk_pad_;
      std::copy(dq, dq + qt.size * dqk_pad_, part);
      return;
    }
    for (int64_t i = 0; i < qt.size; ++i) {
      for (int64_t d = 0; d < p_.Dqk; ++d) {
        float& dst = p_.dq(b, qt.begin + i, h, d);
        dst = p_.accumulate ? dst + dq[i * dqk_pad_ + d] : dq[i * dqk_pad_ + d];
      }
    }
  }

  // dq = (accumulate ? dq : 0) + (partial_0 + partial_1 + ...), always in chunk order.
  void reduce_dq() const {
    const int64_t chunk_stride = p_.B * p_.Hq * p_.Sq * dqk_pad_;
    parallel_for(p_.B * p_.Hq, p_.num_threads, p_.interruption_point, [&](int64_t bh, int) {
      const int64_t b = bh / p_.Hq, h = bh % p_.Hq;
      for (int64_t i = 0; i < p_.Sq; ++i) {
        const float* row = dq_part_ + (bh * p_.Sq + i) * dqk_pad_;
        for (int64_t d = 0; d < p_.Dqk; ++d) {
          float sum = row[d];
          for (int64_t c = 1; c < chunks_; ++c) sum += row[c * chunk_stride + d];
          float& dst = p_.dq(b, i, h, d);
          dst = p_.accumulate ? dst + sum : sum;
        }
      }
    });
  }

  const BackwardProblem& p_;
  TileMask mask_;
  DropoutRow dropout_;
  std::vector<TileRange> q_tiles_, k_tiles_;
  int64_t dqk_pad_, dv_pad_;
  int64_t chunks_, tiles_per_chunk_;
  ScratchLayout layout_;  // declared before at_: plan_scratch() fills it
  Offsets at_;
  std::span<const float> delta_;
  Tensor delta_storage_;
  Tensor dq_partial_;         // [chunks][B][Hq][Sq][Dqk_pad] fp32 dq contributions
  float* dq_part_ = nullptr;  // dq_partial_.data(), written by items of disjoint (chunk, b, g)
};

}  // namespace

void run_backward(const BackwardProblem& p) {
  // No early exit for empty q or k sides: overwrite mode must still zero dk/dv (or dq).
  BackwardRunner(p).run();
}

}  // namespace cpattn::detail
