// RMSNorm forward/backward, one token row at a time.
#include "train/rmsnorm.h"

#include <cmath>

#include "train/check.h"
#include "train/model_config.h"

namespace cpattn::train {

namespace {
// r = 1 / sqrt(mean(x^2) + eps) of one row, in double then rounded once.
float inv_rms(const float* x, int64_t d) {
  double ss = 0.0;
  for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + kRmsNormEps));
}

void check_args(const char* op, int64_t n, int64_t d, size_t x_size, size_t gain_size) {
  detail::check_at_least(op, "N", n, 0);
  detail::check_at_least(op, "d", d, 1);
  detail::check_matrix(op, "x", "[N, d]", x_size, n, d);
  detail::check_matrix(op, "gain", "[1, d]", gain_size, 1, d);
}
}  // namespace

void rmsnorm_forward(int64_t n, int64_t d, std::span<const float> x, std::span<const float> gain,
                     std::span<float> y) {
  constexpr const char* kOp = "rmsnorm_forward";
  check_args(kOp, n, d, x.size(), gain.size());
  detail::check_matrix(kOp, "y", "[N, d]", y.size(), n, d);
  const float* g = gain.data();
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x.data() + r * d;
    float* yr = y.data() + r * d;
    const float inv = inv_rms(xr, d);
    for (int64_t i = 0; i < d; ++i) yr[i] = g[i] * (xr[i] * inv);
  }
}

void rmsnorm_backward(int64_t n, int64_t d, std::span<const float> dy, std::span<const float> x,
                      std::span<const float> gain, std::span<float> dx, std::span<float> dgain) {
  constexpr const char* kOp = "rmsnorm_backward";
  check_args(kOp, n, d, x.size(), gain.size());
  detail::check_matrix(kOp, "dy", "[N, d]", dy.size(), n, d);
  detail::check_matrix(kOp, "dx", "[N, d]", dx.size(), n, d);
  detail::check_matrix(kOp, "dgain", "[1, d]", dgain.size(), 1, d);
  const float* g = gain.data();
  float* dg = dgain.data();
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x.data() + r * d;
    const float* dyr = dy.data() + r * d;
    float* dxr = dx.data() + r * d;
    const float inv = inv_rms(xr, d);
    double dot = 0.0;  // sum_j g_j dy_j xhat_j
    for (int64_t i = 0; i < d; ++i) {
      const float xhat = xr[i] * inv;
      dot += static_cast<double>(g[i] * dyr[i]) * xhat;
      dg[i] += dyr[i] * xhat;
    }
    const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
    for (int64_t i = 0; i < d; ++i) {
      dxr[i] = inv * (g[i] * dyr[i] - (xr[i] * inv) * mean_dot);
    }
  }
}

}  // namespace cpattn::train
