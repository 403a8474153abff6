// Smoke test of the CPU flash-attention kernel: a few cases against a naive in-test float64
// attention (forward), finite differences of it (backward), and the shared golden vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "support/vectors.h"

namespace cpattn {
namespace {

using Vec = std::vector<double>;

struct Case {
  int64_t B, Sq, Sk, Hq, Hkv, Dqk, Dv;
  AttentionParams params;
  RngState rng{1234, 5};
  std::vector<int64_t> q_pos, k_pos, q_doc, k_doc;
  Vec q, k, v;  // flat BSHD
};

int64_t idx(int64_t b, int64_t s, int64_t h, int64_t d, int64_t S, int64_t H, int64_t D) {
  return ((b * S + s) * H + h) * D + d;
}

// Naive float64 attention of docs/design.md section 1 (dropout mask from the rng.h contract).
void naive_forward(const Case& c, const Vec& q, const Vec& k, const Vec& v, Vec& out, Vec& lse) {
  const double scale = c.params.softmax_scale.value_or(1.0 / std::sqrt(double(c.Dqk)));
  out.assign(size_t(c.B * c.Sq * c.Hq * c.Dv), 0.0);
  lse.assign(size_t(c.B * c.Hq * c.Sq), -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Sq; ++i) {
        const int64_t g = h / (c.Hq / c.Hkv), qp = c.q_pos[size_t(i)];
        std::vector<double> s(size_t(c.Sk), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Sk; ++j) {
          const int64_t kp = c.k_pos[size_t(j)];
          bool vis = !c.params.causal || kp <= qp;
          if (c.params.window_left >= 0) vis = vis && kp >= qp - c.params.window_left;
          if (c.params.window_right >= 0) vis = vis && kp <= qp + c.params.window_right;
          if (!c.q_doc.empty()) vis = vis && c.q_doc[size_t(i)] == c.k_doc[size_t(j)];
          if (!vis) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.Dqk; ++d)
            dot += q[size_t(idx(b, i, h, d, c.Sq, c.Hq, c.Dqk))] *
                   k[size_t(idx(b, j, g, d, c.Sk, c.Hkv, c.Dqk))];
          s[size_t(j)] = scale * dot;
          mx = std::max(mx, s[size_t(j)]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        const double l = mx + std::log(sum);
        lse[size_t((b * c.Hq + h) * c.Sq + i)] = l;
        for (int64_t j = 0; j < c.Sk; ++j) {
          if (s[size_t(j)] == -INFINITY) continue;
          double p = std::exp(s[size_t(j)] - l);
          if (c.params.dropout_p > 0) {
            const uint32_t r = dropout_bits(c.rng, b, h, c.Hq, qp, c.k_pos[size_t(j)]);
            p = dropout_keep(r, c.params.dropout_p) ? p / (1.0 - c.params.dropout_p) : 0.0;
          }
          for (int64_t d = 0; d < c.Dv; ++d)
            out[size_t(idx(b, i, h, d, c.Sq, c.Hq, c.Dv))] +=
                p * v[size_t(idx(b, j, g, d, c.Sk, c.Hkv, c.Dv))];
        }
      }
}

// Copies flat BSHD data into a tensor stored in `layout`, returned with its [B, S, H, D] view.
Tensor to_layout(const Vec& x, std::array<int64_t, 4> bshd, MemoryLayout layout) {
  const auto [B, S, H, D] = bshd;
  std::vector<int64_t> storage = {B, S, H, D};
  if (layout == MemoryLayout::kBHSD) storage = {B, H, S, D};
  if (layout == MemoryLayout::kSBHD) storage = {S, B, H, D};
  Tensor t(storage);
  View view = t.view(layout);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d)
          view(b, s, h, d) = float(x[size_t(idx(b, s, h, d, S, H, D))]);
  return t;
}

Vec from_view(ConstView v) {
  Vec out;
  for (int64_t b = 0; b < v.shape[0]; ++b)
    for (int64_t s = 0; s < v.shape[1]; ++s)
      for (int64_t h = 0; h < v.shape[2]; ++h)
        for (int64_t d = 0; d < v.shape[3]; ++d) out.push_back(v(b, s, h, d));
  return out;
}

// max |got - want| relative to max |want| (or absolute when want is ~0); -inf must match.
double rel_err(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, ref = 1e-3;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "at " << i;
      continue;
    }
    err = std::max(err, std::abs(got[i] - want[i]));
    ref = std::max(ref, std::abs(want[i]));
  }
  return err / ref;
}

Case make_case(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t Dqk, int64_t Dv,
               uint32_t seed) {
  Case c{B, Sq, Sk, Hq, Hkv, Dqk, Dv, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  for (auto [vec, n] : {std::pair{&c.q, B * Sq * Hq * Dqk},
                        {&c.k, B * Sk * Hkv * Dqk},
                        {&c.v, B * Sk * Hkv * Dv}}) {
    for (int64_t i = 0; i < n; ++i) vec->push_back(nd(gen));
  }
  for (int64_t i = 0; i < Sq; ++i) c.q_pos.push_back(std::max<int64_t>(0, Sk - Sq) + i);
  for (int64_t j = 0; j < Sk; ++j) c.k_pos.push_back(j);
  return c;
}

struct KernelRun {
  Vec out, lse;
  Tensor q, k, v, out_t, lse_t;
};

KernelRun run_forward(const Case& c, MemoryLayout layout, int threads) {
  KernelRun r;
  r.q = to_layout(c.q, {c.B, c.Sq, c.Hq, c.Dqk}, layout);
  r.k = to_layout(c.k, {c.B, c.Sk, c.Hkv, c.Dqk}, layout);
  r.v = to_layout(c.v, {c.B, c.Sk, c.Hkv, c.Dv}, layout);
  r.out_t = to_layout(Vec(size_t(c.B * c.Sq * c.Hq * c.Dv)), {c.B, c.Sq, c.Hq, c.Dv}, layout);
  r.lse_t = Tensor({c.B, c.Hq, c.Sq});
  const AttentionInputs in{std::as_const(r.q).view(layout),
                           std::as_const(r.k).view(layout),
                           std::as_const(r.v).view(layout),
                           c.q_pos,
                           c.k_pos,
                           c.q_doc,
                           c.k_doc};
  KernelOptions opt;
  opt.num_threads = threads;
  attention_kernel_forward(in, c.params, c.rng, r.out_t.view(layout), r.lse_t.span(), opt);
  r.out = from_view(r.out_t.view(layout));
  r.lse.assign(r.lse_t.span().begin(), r.lse_t.span().end());
  return r;
}

void expect_forward_matches(const Case& c, MemoryLayout layout, int threads) {
  Vec out, lse;
  naive_forward(c, c.q, c.k, c.v, out, lse);
  const KernelRun r = run_forward(c, layout, threads);
  EXPECT_LT(rel_err(r.out, out), 2e-5);
  EXPECT_LT(rel_err(r.lse, lse), 2e-5);
}

TEST(KernelSmoke, FullOddSizesBhsdGqa) {
  Case c = make_case(2, 37, 153, 4, 2, 40, 24, 1);
  expect_forward_matches(c, MemoryLayout::kBHSD, 2);
}

TEST(KernelSmoke, CausalDropoutZigzagSbhd) {
  Case c = make_case(1, 200, 200, 6, 2, 64, 64, 2);
  // Zigzag halves (chunks 0 and 3 of 4): non-monotone positions.
  for (int64_t i = 0; i < 200; ++i) c.q_pos[size_t(i)] = c.k_pos[size_t(i)] = i < 100 ? i : 200 + i;
  c.params.causal = true;
  c.params.dropout_p = 0.2f;
  expect_forward_matches(c, MemoryLayout::kSBHD, 2);
}

TEST(KernelSmoke, DocumentsWindowEmptyRows) {
  Case c = make_case(1, 150, 140, 2, 1, 16, 32, 3);
  for (int64_t i = 0; i < 150; ++i) c.q_doc.push_back(i / 50);
  for (int64_t j = 0; j < 140; ++j) c.k_doc.push_back(j < 60 ? j / 30 : 7);  // doc 2: no keys
  c.params.window_left = 20;
  c.params.window_right = 3;
  expect_forward_matches(c, MemoryLayout::kBSHD, 1);
}

// Backward vs central differences of the float64 forward on loss = sum(out * w).
TEST(KernelSmoke, BackwardMatchesFiniteDifferences) {
  Case c = make_case(1, 70, 75, 4, 2, 12, 8, 4);
  c.params.causal = true;
  c.params.dropout_p = 0.1f;
  std::mt19937 gen(9);
  std::normal_distribution<double> nd;
  Vec w(size_t(c.B * c.Sq * c.Hq * c.Dv));
  for (double& x : w) x = nd(gen);
  auto loss = [&](const Vec& q, const Vec& k, const Vec& v) {
    Vec out, lse;
    naive_forward(c, q, k, v, out, lse);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
    return s;
  };
  KernelRun fwd = run_forward(c, MemoryLayout::kBHSD, 2);
  const Tensor dout = to_layout(w, {c.B, c.Sq, c.Hq, c.Dv}, MemoryLayout::kBSHD);
  const AttentionInputs in{std::as_const(fwd.q).view(MemoryLayout::kBHSD),
                           std::as_const(fwd.k).view(MemoryLayout::kBHSD),
                           std::as_const(fwd.v).view(MemoryLayout::kBHSD),
                           c.q_pos,
                           c.k_pos,
                           {},
                           {}};
  KernelOptions opt;
  opt.num_threads = 2;
  const AttentionGradients g = attention_kernel_backward(
      in, c.params, c.rng, dout.view(), fwd.out_t.view(MemoryLayout::kBHSD), fwd.lse_t.span(), opt);
  // Sampled coordinates of each input; the mask is piecewise constant, so FD is exact-ish.
  for (auto [x, grad] : {std::pair{&c.q, &g.dq}, {&c.k, &g.dk}, {&c.v, &g.dv}}) {
    std::uniform_int_distribution<size_t> pick(0, x->size() - 1);
    Vec got, want;
    for (int n = 0; n < 30; ++n) {
      const size_t i = pick(gen);
      const double x0 = (*x)[i], eps = 1e-5;
      (*x)[i] = x0 + eps;
      const double up = loss(c.q, c.k, c.v);
      (*x)[i] = x0 - eps;
      const double down = loss(c.q, c.k, c.v);
      (*x)[i] = x0;
      want.push_back((up - down) / (2 * eps));
      got.push_back(grad->data()[i]);  // gradients are BSHD like the flat inputs
    }
    EXPECT_LT(rel_err(got, want), 1e-4);
  }
}

TEST(KernelSmoke, GoldenVectors) {
  for (const auto& gc : testing::load_golden_cases()) {
    SCOPED_TRACE(gc.name);
    auto f = [](const Vec& x) { return std::vector<float>(x.begin(), x.end()); };
    const auto q = f(gc.q), k = f(gc.k), v = f(gc.v), dout = f(gc.dout);
    const std::array<int64_t, 4> qs{gc.B, gc.Sq, gc.Hq, gc.Dqk}, ks{gc.B, gc.Sk, gc.Hkv, gc.Dqk},
        vs{gc.B, gc.Sk, gc.Hkv, gc.Dv}, os{gc.B, gc.Sq, gc.Hq, gc.Dv};
    auto cv = [](const std::vector<float>& x, std::array<int64_t, 4> s) {
      return ConstView{x.data(), s, dense_strides(s, MemoryLayout::kBSHD)};
    };
    const AttentionInputs in{cv(q, qs), cv(k, ks), cv(v, vs), gc.q_pos,
                             gc.k_pos,  gc.q_doc,  gc.k_doc};
    const auto fwd = attention_kernel_forward(in, gc.params, gc.rng);
    EXPECT_LT(rel_err(Vec(fwd.out.span().begin(), fwd.out.span().end()), gc.out), 1e-5);
    EXPECT_LT(rel_err(Vec(fwd.lse.span().begin(), fwd.lse.span().end()), gc.lse), 1e-5);
    const auto g = attention_kernel_backward(in, gc.params, gc.rng, cv(dout, os), fwd.out.view(),
                                             fwd.lse.span());
    EXPECT_LT(rel_err(Vec(g.dq.span().begin(), g.dq.span().end()), gc.dq), 1e-4);
    EXPECT_LT(rel_err(Vec(g.dk.span().begin(), g.dk.span().end()), gc.dk), 1e-4);
    EXPECT_LT(rel_err(Vec(g.dv.span().begin(), g.dv.span().end()), gc.dv), 1e-4);
  }
}

TEST(KernelSmoke, ShapeErrorNamesExpectedAndGot) {
  std::vector<float> q(2 * 97 * 4 * 64), k(2 * 97 * 2 * 40), v(2 * 97 * 2 * 64);
  std::vector<int64_t> pos(97);
  const AttentionInputs in{
      {q.data(), {2, 97, 4, 64}, dense_strides({2, 97, 4, 64}, MemoryLayout::kBSHD)},
      {k.data(), {2, 97, 2, 40}, dense_strides({2, 97, 2, 40}, MemoryLayout::kBSHD)},
      {v.data(), {2, 97, 2, 64}, dense_strides({2, 97, 2, 64}, MemoryLayout::kBSHD)},
      pos,
      pos,
      {},
      {}};
  try {
    attention_kernel_forward(in, {}, {});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
    EXPECT_STREQ(e.what(),
                 "k must have shape [B, Sk, Hkv, Dqk] = [2, 97, 2, 64], got [2, 97, 2, 40]");
  }
}

}  // namespace
}  // namespace cpattn
