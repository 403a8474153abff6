// A composed tiny model built only from the train/ ops (embedding -> 2 pre-norm layers with a
// naive causal stand-in attention written here -> final norm -> LM head -> cross-entropy): the
// hand-chained backward matches finite differences for every parameter tensor, and permuting the
// token rows (as a CP layout does) leaves loss and gradients unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "grad_check.h"
#include "train/cross_entropy.h"
#include "train/embedding.h"
#include "train/linear.h"
#include "train/mlp.h"
#include "train/model_config.h"
#include "train/model_params.h"
#include "train/rmsnorm.h"
#include "train/rope.h"

namespace cpattn::train {
namespace {

using testing::numeric_grad;
using testing::random_vector;
using testing::spread_indices;

using Vec = std::vector<float>;

/// Stand-in for cpattn attention: causal on global positions (key visible when pos_k <= pos_q),
/// GQA, scale 1/sqrt(D), computed in double. Reads q, k, v from fused QKV rows; writes [N, H*D].
struct NaiveAttention {
  int64_t n, heads, kv_heads, hd;
  const std::vector<int64_t>& pos;

  int64_t qkv_dim() const { return (heads + 2 * kv_heads) * hd; }
  const float* q(const Vec& qkv, int64_t i, int64_t h) const {
    return &qkv[i * qkv_dim() + h * hd];
  }
  int64_t k_off(int64_t h) const { return heads * hd + (h / (heads / kv_heads)) * hd; }
  int64_t v_off(int64_t h) const { return k_off(h) + kv_heads * hd; }

  // Softmax over the keys visible to query row i in head h (0 for hidden keys).
  std::vector<double> probs(const Vec& qkv, int64_t h, int64_t i) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> s(static_cast<size_t>(n), -INFINITY);
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      if (pos[j] > pos[i]) continue;
      double dot = 0.0;
      for (int64_t d = 0; d < hd; ++d)
        dot += static_cast<double>(q(qkv, i, h)[d]) * qkv[j * qkv_dim() + k_off(h) + d];
      s[j] = dot * scale;
      m = std::max(m, s[j]);
    }
    double z = 0.0;
    for (double& v : s) z += (v = std::exp(v - m));
    for (double& v : s) v /= z;
    return s;
  }

  void forward(const Vec& qkv, Vec& out) const {
    out.assign(static_cast<size_t>(n * heads * hd), 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const auto p = probs(qkv, h, i);
        for (int64_t d = 0; d < hd; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] * qkv[j * qkv_dim() + v_off(h) + d];
          out[(i * heads + h) * hd + d] = static_cast<float>(acc);
        }
      }
    }
  }

  // dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), dP_ij = <dout_i, v_j>.
  void backward(const Vec& qkv, const Vec& dout, Vec& dqkv) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> acc(qkv.size(), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const auto p = probs(qkv, h, i);
        const float* go = &dout[(i * heads + h) * hd];
        std::vector<double> dp(static_cast<size_t>(n), 0.0);
        double dsum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t d = 0; d < hd; ++d)
            dp[j] += static_cast<double>(go[d]) * qkv[j * qkv_dim() + v_off(h) + d];
          dsum += p[j] * dp[j];
        }
        for (int64_t j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - dsum) * scale;
          for (int64_t d = 0; d < hd; ++d) {
            acc[i * qkv_dim() + h * hd + d] += ds * qkv[j * qkv_dim() + k_off(h) + d];
            acc[j * qkv_dim() + k_off(h) + d] += ds * q(qkv, i, h)[d];
            acc[j * qkv_dim() + v_off(h) + d] += p[j] * go[d];
          }
        }
      }
    }
    dqkv.assign(acc.begin(), acc.end());
  }
};

/// Activations one layer keeps for its backward.
struct LayerActs {
  Vec x_in, xn, qkv, att, h, hn;
  MlpCache mlp;
};

struct TinyModel {
  const ModelConfig& c;
  std::vector<int32_t> tokens, targets;
  std::vector<int64_t> pos;
  int64_t n() const { return static_cast<int64_t>(tokens.size()); }

  NaiveAttention attention() const { return {n(), c.heads, c.kv_heads, c.head_dim(), pos}; }
  RopeDims rope_q() const { return {n(), c.heads, c.head_dim(), c.qkv_dim()}; }
  RopeDims rope_k() const { return {n(), c.kv_heads, c.head_dim(), c.qkv_dim()}; }

  double forward(const ModelParams& p, std::vector<LayerActs>* acts, Vec* xf_out, Vec* xl_out,
                 Vec* logits_out) const {
    const int64_t N = n(), d = c.d_model;
    Vec x(static_cast<size_t>(N * d));
    embedding_forward(c.vocab, d, tokens, p.embed(), x);
    for (int64_t l = 0; l < c.layers; ++l) {
      const auto w = p.layer(l);
      LayerActs a;
      a.x_in = x;
      a.xn.resize(x.size());
      rmsnorm_forward(N, d, x, w.attn_norm, a.xn);
      a.qkv.resize(static_cast<size_t>(N * c.qkv_dim()));
      linear_forward({N, d, c.qkv_dim()}, a.xn, w.wqkv, {}, a.qkv);
      const RopeTable table(pos, c.head_dim(), c.rope_base);
      rope_forward(rope_q(), a.qkv, table);
      rope_forward(rope_k(), std::span(a.qkv).subspan(static_cast<size_t>(c.q_dim())), table);
      attention().forward(a.qkv, a.att);
      Vec o(x.size());
      linear_forward({N, c.q_dim(), d}, a.att, w.wo, {}, o);
      a.h.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) a.h[i] = x[i] + o[i];
      a.hn.resize(x.size());
      rmsnorm_forward(N, d, a.h, w.mlp_norm, a.hn);
      Vec m(x.size());
      a.mlp = mlp_forward({N, d, c.hidden()}, a.hn, w.w1, w.w2, m);
      for (size_t i = 0; i < x.size(); ++i) x[i] = a.h[i] + m[i];
      if (acts) acts->push_back(std::move(a));
    }
    Vec xf(x.size()), logits(static_cast<size_t>(N * c.vocab));
    rmsnorm_forward(N, d, x, p.final_norm(), xf);
    linear_forward({N, d, c.vocab}, xf, p.lm_head(), {}, logits);
    const double loss = cross_entropy_forward(c.vocab, logits, targets, N);
    if (xf_out) *xf_out = std::move(xf);
    if (xl_out) *xl_out = std::move(x);
    if (logits_out) *logits_out = std::move(logits);
    return loss;
  }

  double backward(const ModelParams& p, ModelGrads& g) const {
    const int64_t N = n(), d = c.d_model;
    std::vector<LayerActs> acts;
    Vec xf, xl, logits;
    const double loss = forward(p, &acts, &xf, &xl, &logits);
    Vec dlogits(logits.size());
    cross_entropy_backward(c.vocab, logits, targets, N, 1.0f, dlogits);
    Vec dxf(xf.size()), dx(xf.size());
    linear_backward({N, d, c.vocab}, dlogits, xf, p.lm_head(), dxf, g.lm_head(), {});
    rmsnorm_backward(N, d, dxf, xl, p.final_norm(), dx, g.final_norm());
    for (int64_t l = c.layers - 1; l >= 0; --l) {
      const auto w = p.layer(l);
      const auto gw = g.layer(l);
      const LayerActs& a = acts[static_cast<size_t>(l)];
      Vec dhn(dx.size()), dh = dx, tmp(dx.size());
      mlp_backward({N, d, c.hidden()}, dx, a.hn, w.w1, w.w2, a.mlp, dhn, gw.w1, gw.w2);
      rmsnorm_backward(N, d, dhn, a.h, w.mlp_norm, tmp, gw.mlp_norm);
      for (size_t i = 0; i < dh.size(); ++i) dh[i] += tmp[i];
      Vec datt(a.att.size()), dqkv, dxn(dx.size());
      linear_backward({N, c.q_dim(), d}, dh, a.att, w.wo, datt, gw.wo, {});
      attention().backward(a.qkv, datt, dqkv);
      const RopeTable table(pos, c.head_dim(), c.rope_base);
      rope_backward(rope_q(), dqkv, table);
      rope_backward(rope_k(), std::span(dqkv).subspan(static_cast<size_t>(c.q_dim())), table);
      linear_backward({N, d, c.qkv_dim()}, dqkv, a.xn, w.wqkv, dxn, gw.wqkv, {});
      rmsnorm_backward(N, d, dxn, a.x_in, w.attn_norm, tmp, gw.attn_norm);
      for (size_t i = 0; i < dx.size(); ++i) dx[i] = dh[i] + tmp[i];
    }
    embedding_backward(c.vocab, d, tokens, dx, g.embed());
    return loss;
  }
};

ModelConfig tiny_config() { return testing::tiny_model(2, 16, 4, 2, 24, 11, 5); }

// Weights larger than the 0.02 init so that the gradients stand well above float noise.
void widen(ModelParams& p) {
  p.for_each([](const ParamInfo& info, std::span<float> w) {
    const auto r = random_vector(w.size(), info.offset + 1, -0.4f, 0.4f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = info.decay ? r[i] : 1.0f + r[i];
  });
}

TinyModel sample_model(const ModelConfig& c) {
  TinyModel m{c, {3, 7, 7, 0, 10, 2, 5, 9, 1}, {7, 7, 0, 10, 2, 5, 9, 1, 4}, {}};
  m.pos.resize(m.tokens.size());
  std::iota(m.pos.begin(), m.pos.end(), int64_t{100});  // a shard far into the sequence
  return m;
}

TEST(ComposedBlock, BackwardMatchesFiniteDifferencesForEveryTensor) {
  const ModelConfig c = tiny_config();
  ModelParams p(c);
  widen(p);
  ModelGrads g(c);
  const TinyModel model = sample_model(c);
  model.backward(p, g);
  for (const ParamInfo& info : p.infos()) {
    const auto idx = spread_indices(static_cast<size_t>(info.numel), 6);
    const auto num = numeric_grad(
        p.get(info), [&] { return model.forward(p, nullptr, nullptr, nullptr, nullptr); }, idx);
    testing::expect_grad_near(g.get(info), num, 4e-3, info.name, idx);
  }
}

TEST(ComposedBlock, PermutedRowsGiveTheSameLossAndGradients) {
  const ModelConfig c = tiny_config();
  ModelParams p(c);
  widen(p);
  const TinyModel model = sample_model(c);
  // Zigzag-like order: the rows of chunks 0 and 2 first, then chunk 1, as a CP rank might hold.
  const std::vector<size_t> order = {0, 1, 2, 6, 7, 8, 3, 4, 5};
  TinyModel perm{c, {}, {}, {}};
  for (size_t i : order) {
    perm.tokens.push_back(model.tokens[i]);
    perm.targets.push_back(model.targets[i]);
    perm.pos.push_back(model.pos[i]);
  }
  ModelGrads ga(c), gb(c);
  const double la = model.backward(p, ga), lb = perm.backward(p, gb);
  EXPECT_NEAR(la, lb, 1e-6);
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < ga.flat().size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(ga.flat()[i] - gb.flat()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(ga.flat()[i])));
  }
  EXPECT_LE(worst, 1e-5 * scale);
}

}  // namespace
}  // namespace cpattn::train
