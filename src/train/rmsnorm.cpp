// RMSNorm forward/backward, one token row at a time.
#include "train/rmsnorm.h"

#include <cmath>

#include "train/check.h"
#include "train/model_config.h"
#include "train/vector_math.h"

namespace cpattn::train {

namespace {
// r = 1 / sqrt(mean(x^2) + eps) of one row, in double then rounded once.
inline float inv_rms(const float* x, int64_t d) {
  const double ss = detail::ordered_sum(static_cast<size_t>(d),
                                        [&](size_t i) { return static_cast<double>(x[i]) * x[i]; });
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + kRmsNormEps));
}

void check_args(const char* op, int64_t n, int64_t d, size_t x_size, size_t gain_size) {
  detail::check_at_least(op, "N", n, 0);
  detail::check_at_least(op, "d", d, 1);
  detail::check_matrix(op, "x", "[N, d]", x_size, n, d);
  detail::check_matrix(op, "gain", "[1, d]", gain_size, 1, d);
}

CPATTN_TRAIN_VECTOR_CLONES
void forward_rows(int64_t n, int64_t d, const float* x, const float* g, float* y) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const float inv = inv_rms(xr, d);
    CPATTN_TRAIN_ELEMENTWISE
    for (int64_t i = 0; i < d; ++i) yr[i] = g[i] * (xr[i] * inv);
  }
}

CPATTN_TRAIN_VECTOR_CLONES
void backward_rows(int64_t n, int64_t d, const float* dy, const float* x, const float* g, float* dx,
                   float* dg) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    float* dxr = dx + r * d;
    const float inv = inv_rms(xr, d);
    // sum_j g_j dy_j xhat_j
    const double dot = detail::ordered_sum(static_cast<size_t>(d), [&](size_t i) {
      return static_cast<double>(g[i] * dyr[i]) * (xr[i] * inv);
    });
    for (int64_t i = 0; i < d; ++i) dg[i] += dyr[i] * (xr[i] * inv);
    const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
    CPATTN_TRAIN_ELEMENTWISE
    for (int64_t i = 0; i < d; ++i) {
      dxr[i] = inv * (g[i] * dyr[i] - (xr[i] * inv) * mean_dot);
    }
  }
}
}  // namespace

void rmsnorm_forward(int64_t n, int64_t d, std::span<const float> x, std::span<const float> gain,
                     std::span<float> y) {
  constexpr const char* kOp = "rmsnorm_forward";
  check_args(kOp, n, d, x.size(), gain.size());
  detail::check_matrix(kOp, "y", "[N, d]", y.size(), n, d);
  forward_rows(n, d, x.data(), gain.data(), y.data());
}

void rmsnorm_backward(int64_t n, int64_t d, std::span<const float> dy, std::span<const float> x,
                      std::span<const float> gain, std::span<float> dx, std::span<float> dgain) {
  constexpr const char* kOp = "rmsnorm_backward";
  check_args(kOp, n, d, x.size(), gain.size());
  detail::check_matrix(kOp, "dy", "[N, d]", dy.size(), n, d);
  detail::check_matrix(kOp, "dx", "[N, d]", dx.size(), n, d);
  detail::check_matrix(kOp, "dgain", "[1, d]", dgain.size(), 1, d);
  backward_rows(n, d, dy.data(), x.data(), gain.data(), dx.data(), dgain.data());
}

}  // namespace cpattn::train
