// Helpers of the train/ tests: small model configs, seeded random fills and central-difference
// gradient checks of float ops (Richardson-extrapolated, loss accumulated in double).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "train/model_config.h"
#include "train/random.h"

namespace cpattn::train::testing {

/// A small model for tests (mlp_hidden explicit so that odd widths get exercised).
inline ModelConfig tiny_model(int64_t layers, int64_t d_model, int64_t heads, int64_t kv_heads,
                              int64_t mlp_hidden, int64_t vocab, uint64_t seed) {
  ModelConfig c;
  c.layers = layers;
  c.d_model = d_model;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.mlp_hidden = mlp_hidden;
  c.vocab = vocab;
  c.seed = seed;
  return c;
}

/// n values uniform in [lo, hi) from a SplitMix64 seeded with `seed`.
inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng.next_double());
  return v;
}

/// sum_i w[i] * y[i] in double: the scalar loss whose gradient w.r.t. y is w.
inline double weighted_sum(std::span<const float> y, std::span<const float> w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

/// Numeric dL/dx[i] for the listed indices (all when empty): central differences at steps h and
/// h/2 combined by Richardson extrapolation (truncation error O(h^4)). `loss` reads x.
inline std::vector<double> numeric_grad(std::span<float> x, const std::function<double()>& loss,
                                        std::vector<size_t> indices = {}, float h = 1e-2f) {
  if (indices.empty()) {
    for (size_t i = 0; i < x.size(); ++i) indices.push_back(i);
  }
  std::vector<double> g(x.size(), 0.0);
  auto central = [&](size_t i, float step) {
    const float x0 = x[i];
    const float xp = x0 + step, xm = x0 - step;
    x[i] = xp;
    const double fp = loss();
    x[i] = xm;
    const double fm = loss();
    x[i] = x0;
    return (fp - fm) / (static_cast<double>(xp) - xm);
  };
  for (size_t i : indices) {
    const double d1 = central(i, h), d2 = central(i, h / 2);
    g[i] = (4.0 * d2 - d1) / 3.0;
  }
  return g;
}

/// Expects |analytic[i] - numeric[i]| <= tol * (max_j |numeric[j]| + 1e-3) for the listed
/// indices (all when empty): errors judged against the gradient's scale.
inline void expect_grad_near(std::span<const float> analytic, std::span<const double> numeric,
                             double tol, const std::string& what,
                             const std::vector<size_t>& indices = {}) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  std::vector<size_t> idx = indices;
  if (idx.empty()) {
    for (size_t i = 0; i < numeric.size(); ++i) idx.push_back(i);
  }
  double scale = 1e-3;
  for (size_t i : idx) scale = std::max(scale, std::abs(numeric[i]));
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i : idx) {
    const double err = std::abs(static_cast<double>(analytic[i]) - numeric[i]);
    if (err > worst) worst = err, worst_i = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst at [" << worst_i << "] analytic "
                                << analytic[worst_i] << " vs numeric " << numeric[worst_i]
                                << " (scale " << scale << ")";
}

/// Up to `count` indices in [0, n), spread evenly (all when n <= count).
inline std::vector<size_t> spread_indices(size_t n, size_t count) {
  std::vector<size_t> idx;
  if (n <= count) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (size_t k = 0; k < count; ++k) idx.push_back(k * (n - 1) / (count - 1));
  return idx;
}

}  // namespace cpattn::train::testing
