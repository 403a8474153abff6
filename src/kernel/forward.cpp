// Forward attention (FlashAttention-2, Dao 2023, Alg. 1) on CPU: work items are (q tile, batch,
// kv head, group of q heads); each streams the k/v tiles its q tile can see, packs them once and
// runs every q head of the kv group against them (GQA reuse), with fp32 online softmax.
#include "kernel/forward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
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

// Tile sizes (chosen by measurement, docs/performance.md). The k loop's S^T product has the
// keys as rows (128 = 21 micro-kernel row blocks) and the queries as columns (192 = 12 panels
// of 16), so each packed Q^T panel (Dqk x 16 floats, 8 KiB at D = 128) is reused 22 times from
// L1. Each K/V tile is read from L3/DRAM once per q tile, so the q tile is as tall as L2 allows:
// 192 rows measured 20-25 % faster than 96 at Hkv = Hq (S^T 96 KiB, K rows and V panels 64 KiB
// each, Q^T and O 96 KiB each per head at D = 128). A k tile of 128 keys amortises the
// per-query bookkeeping (max, rescale of O) over 128 keys.
constexpr int64_t kTileQ = 192;
constexpr int64_t kTileK = 128;
// Query heads of one kv group handled by one work item (they share each packed K/V tile).
constexpr int64_t kMaxHeadsPerItem = 4;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The score tile is computed transposed, S^T = K Q^T ([keys][queries], scaled in the softmax pass
// the way the backward recomputes it): K rows are the broadcast operand (a plain row copy per k
// tile) and Q^T is packed once per work item, so no transpose sits in the k loop. The softmax
// statistics then run down columns, 8 queries per vector: max, exp and sums need no horizontal
// reductions.
class ForwardRunner {
 public:
  explicit ForwardRunner(const ForwardProblem& p)
      : p_(p),
        mask_(p),
        dropout_(p),
        q_tiles_(make_tiles(p.q_pos, p.q_doc, kTileQ)),
        k_tiles_(make_tiles(p.k_pos, p.k_doc, kTileK)),
        dv_pad_(round_up_nr(p.Dv)),
        heads_per_item_(std::min(p.group, kMaxHeadsPerItem)),
        head_chunks_((p.group + heads_per_item_ - 1) / heads_per_item_) {
    // Per-worker scratch, one counted Tensor each (floats):
    //   kr [kTileK][Dqk]            K rows of the current k tile
    //   vp [Dv_pad/16][kTileK][16]  V panels of the current k tile
    //   st [kTileK][kTileQ]         S^T scores, then probabilities
    //   z  [kTileK]                 dropout multipliers of one query
    //   al [kTileQ]                 per-query rescale factors exp(m_old - m_new)
    //   per head of the item (head_stride apart): qt [kTileQ/16][Dqk][16] Q^T panels,
    //     o [kTileQ][Dv_pad] accumulator, m [kTileQ] running max, l [kTileQ] running sum
    ScratchLayout head;
    at_.qt = head.add(kTileQ * p.Dqk);
    at_.o = head.add(kTileQ * dv_pad_);
    at_.m = head.add(kTileQ);
    at_.l = head.add(kTileQ);
    at_.head_stride = head.total();
    ScratchLayout item;
    at_.kr = item.add(kTileK * p.Dqk);
    at_.vp = item.add(kTileK * dv_pad_);
    at_.st = item.add(kTileK * kTileQ);
    at_.z = item.add(kTileK);
    at_.alpha = item.add(kTileQ);
    at_.heads = item.add(heads_per_item_ * at_.head_stride);
    scratch_floats_ = item.total();
    order_q_tiles_by_cost();
  }

  void run() {
    const int64_t items = static_cast<int64_t>(q_order_.size()) * p_.B * p_.Hkv * head_chunks_;
    std::vector<Tensor> scratch(static_cast<size_t>(worker_count(items, p_.num_threads)));
    parallel_for(items, p_.num_threads, p_.interruption_point, [&](int64_t item, int worker) {
      Tensor& buf = scratch[static_cast<size_t>(worker)];
      if (buf.numel() == 0) buf = Tensor({scratch_floats_});
      run_item(item, buf.data());
    });
  }

 private:
  // Dynamic scheduling hands out items in index order; putting the q tiles that see the most
  // k tiles first (longest job first) balances causal and windowed work across threads.
  void order_q_tiles_by_cost() {
    std::vector<int64_t> cost(q_tiles_.size(), 0);
    for (size_t i = 0; i < q_tiles_.size(); ++i) {
      for (const TileRange& kt : k_tiles_) {
        cost[i] += mask_.classify(q_tiles_[i], kt) != BlockVisibility::kHidden;
      }
    }
    q_order_.resize(q_tiles_.size());
    std::iota(q_order_.begin(), q_order_.end(), size_t{0});
    std::stable_sort(q_order_.begin(), q_order_.end(),
                     [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  }

  void run_item(int64_t item, float* scratch) const {
    const int64_t chunk = item % head_chunks_;
    const int64_t g = item / head_chunks_ % p_.Hkv;
    const int64_t b = item / head_chunks_ / p_.Hkv % p_.B;
    const size_t q_index = q_order_[static_cast<size_t>(item / head_chunks_ / p_.Hkv / p_.B)];
    const TileRange& qt = q_tiles_[q_index];
    const int64_t h0 = g * p_.group + chunk * heads_per_item_;
    const int64_t nh = std::min(heads_per_item_, p_.group - chunk * heads_per_item_);
    const int64_t nq_pad = round_up_nr(qt.size);

    float* kr = scratch + at_.kr;
    float* vp = scratch + at_.vp;
    float* st = scratch + at_.st;
    float* z = scratch + at_.z;
    float* alpha = scratch + at_.alpha;
    const auto head = [&](int64_t hh) { return scratch + at_.heads + hh * at_.head_stride; };
    for (int64_t hh = 0; hh < nh; ++hh) {
      pack_panels_transposed(p_.q, {b, h0 + hh, qt.begin, qt.size}, 1.0f, head(hh) + at_.qt);
      std::fill_n(head(hh) + at_.o, kTileQ * dv_pad_, 0.0f);
      std::fill_n(head(hh) + at_.m, kTileQ, kNegInf);
      std::fill_n(head(hh) + at_.l, kTileQ, 0.0f);
    }

    const auto next_visible = [&](size_t t) {
      while (t < k_tiles_.size() && mask_.classify(qt, k_tiles_[t]) == BlockVisibility::kHidden)
        ++t;
      return t;
    };
    for (size_t t = next_visible(0); t < k_tiles_.size();) {
      const TileRange& kv = k_tiles_[t];
      const BlockVisibility kind = mask_.classify(qt, kv);
      const size_t next = next_visible(t + 1);
      if (next < k_tiles_.size()) {
        const TileRange& nkv = k_tiles_[next];
        prefetch_rows(p_.k, {b, g, nkv.begin, nkv.size});
        prefetch_rows(p_.v, {b, g, nkv.begin, nkv.size});
      }
      pack_rows(p_.k, {b, g, kv.begin, kv.size}, 1.0f, kr, p_.Dqk);
      pack_panels(p_.v, {b, g, kv.begin, kv.size}, vp);
      for (int64_t hh = 0; hh < nh; ++hh) {
        float* qtp = head(hh) + at_.qt;
        float* o = head(hh) + at_.o;
        float* m = head(hh) + at_.m;
        float* l = head(hh) + at_.l;
        gemm_tile(kv.size, nq_pad, {kr, p_.Dqk, 1}, {qtp, p_.Dqk}, st, kTileQ, false);
        float scale = p_.scale;
        if (kind == BlockVisibility::kPartial) {
          // Scale first so that masked -inf stays -inf whatever the sign of the scale.
          const V8 sc = splat8(scale);
          for (int64_t e = 0; e < kv.size * kTileQ; e += kLanes) store8(st + e, load8(st + e) * sc);
          scale = 1.0f;
          for (int64_t i = 0; i < qt.size; ++i) mask_.mask_keys(qt.begin + i, kv, st + i, kTileQ);
        }
        softmax_columns(kv.size, nq_pad, scale, st, m, l, alpha);
        for (int64_t i = 0; i < qt.size; ++i) {
          if (alpha[i] == 1.0f) continue;
          const V8 a = splat8(alpha[i]);
          float* orow = o + i * dv_pad_;
          for (int64_t d = 0; d < dv_pad_; d += kLanes) store8(orow + d, load8(orow + d) * a);
        }
        if (p_.dropout_p > 0.0f) {
          for (int64_t i = 0; i < qt.size; ++i) {
            dropout_.fill(b, h0 + hh, qt.begin + i, kv, z);
            for (int64_t j = 0; j < kv.size; ++j) st[j * kTileQ + i] *= z[j];
          }
        }
        // O += P V with P read through S^T (row stride 1, k stride kTileQ).
        gemm_tile(qt.size, dv_pad_, {st, 1, kTileQ}, {vp, kv.size}, o, dv_pad_, true);
      }
      t = next;
    }

    for (int64_t hh = 0; hh < nh; ++hh) {
      write_rows(b, h0 + hh, qt, head(hh) + at_.o, head(hh) + at_.m, head(hh) + at_.l);
    }
  }

  // Online softmax down the columns of S^T, 8 queries per vector: m_new = max(m, max_j s_ji),
  // s_ji <- exp(s_ji - m_new), l <- l * exp(m - m_new) + sum_j, and alpha = exp(m - m_new) for
  // rescaling O. Masked scores are -inf and give exactly 0; a
  // column that has seen only masked keys keeps m = -inf and subtracts 0 instead (no NaN).
  static void softmax_columns(int64_t nk, int64_t nq_pad, float scale, float* st, float* m,
                              float* l, float* alpha) {
    const V8 neg_inf = splat8(kNegInf), sc = splat8(scale);
    for (int64_t c = 0; c < nq_pad; c += 2 * kLanes) {
      float* col = st + c;
      const V8 m_old0 = load8(m + c), m_old1 = load8(m + c + kLanes);
      V8 mx0 = m_old0, mx1 = m_old1;
      for (int64_t j = 0; j < nk; ++j) {
        const V8 s0 = load8(col + j * kTileQ) * sc, s1 = load8(col + j * kTileQ + kLanes) * sc;
        store8(col + j * kTileQ, s0);
        store8(col + j * kTileQ + kLanes, s1);
        mx0 = max8(mx0, s0);
        mx1 = max8(mx1, s1);
      }
      const V8 ref0 = mx0 == neg_inf ? V8{} : mx0;
      const V8 ref1 = mx1 == neg_inf ? V8{} : mx1;
      V8 sum0{}, sum1{};
      for (int64_t j = 0; j < nk; ++j) {
        const V8 p0 = exp_8(load8(col + j * kTileQ) - ref0);
        const V8 p1 = exp_8(load8(col + j * kTileQ + kLanes) - ref1);
        store8(col + j * kTileQ, p0);
        store8(col + j * kTileQ + kLanes, p1);
        sum0 += p0;
        sum1 += p1;
      }
      const V8 a0 = exp_8(m_old0 - ref0), a1 = exp_8(m_old1 - ref1);
      store8(l + c, load8(l + c) * a0 + sum0);
      store8(l + c + kLanes, load8(l + c + kLanes) * a1 + sum1);
      store8(m + c, mx0);
      store8(m + c + kLanes, mx1);
      store8(alpha + c, a0);
      store8(alpha + c + kLanes, a1);
    }
  }

  // out_i = O_i / l_i, lse_i = m_i + ln l_i; rows that saw no key get 0 and -inf.
  void write_rows(int64_t b, int64_t h, const TileRange& qt, const float* o, const float* m,
                  const float* l) const {
    float* lse = p_.lse.data() + (b * p_.Hq + h) * p_.Sq;
    const int64_t sd = p_.out.stride[3];
    for (int64_t i = 0; i < qt.size; ++i) {
      // Dv = 0: out may have null data, so no row address is formed.
      float* dst = p_.Dv > 0 ? &p_.out(b, qt.begin + i, h, 0) : nullptr;
      const float* src = o + i * dv_pad_;
      if (l[i] > 0.0f || std::isnan(l[i])) {  // NaN: a NaN input reached the row; keep it
        const float inv = 1.0f / l[i];
        for (int64_t d = 0; d < p_.Dv; ++d) dst[d * sd] = src[d] * inv;
        lse[qt.begin + i] = m[i] + std::log(l[i]);
      } else {
        for (int64_t d = 0; d < p_.Dv; ++d) dst[d * sd] = 0.0f;
        lse[qt.begin + i] = kNegInf;
      }
    }
  }

  const ForwardProblem& p_;
  TileMask mask_;
  DropoutRow dropout_;
  std::vector<TileRange> q_tiles_, k_tiles_;
  std::vector<size_t> q_order_;
  int64_t dv_pad_;
  int64_t heads_per_item_, head_chunks_;
  // Offsets (floats) of the scratch arrays, from one ScratchLayout per level (see the constructor).
  struct Offsets {
    int64_t kr, vp, st, z, alpha, heads;  // in the worker's buffer
    int64_t qt, o, m, l, head_stride;     // in one head's block
  } at_{};
  int64_t scratch_floats_ = 0;
};

}  // namespace

void run_forward(const ForwardProblem& p) {
  if (p.B == 0 || p.Hq == 0 || p.Sq == 0) return;
  ForwardRunner(p).run();
}

}  // namespace cpattn::detail
