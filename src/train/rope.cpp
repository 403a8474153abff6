// RoPE forward (rotate by +angle) and backward (rotate by -angle), interleaved pairs.
#include "train/rope.h"

#include <cmath>

#include "cpattn/error.h"
#include "train/check.h"

namespace cpattn::train {

namespace {
void check_args(const char* op, const RopeDims& d, size_t x_size, size_t pos_size, double base) {
  detail::check_at_least(op, "n", d.n, 0);
  detail::check_at_least(op, "heads", d.heads, 1);
  detail::check_at_least(op, "head_dim", d.head_dim, 2);
  CPATTN_CHECK(d.head_dim % 2 == 0, ErrorCode::kInvalidArgument, op,
               ": head_dim must be even, got ", d.head_dim);
  CPATTN_CHECK(d.row_stride >= d.heads * d.head_dim, ErrorCode::kInvalidArgument, op,
               ": row_stride must be >= heads * head_dim = ", d.heads * d.head_dim, ", got ",
               d.row_stride);
  CPATTN_CHECK(std::isfinite(base) && base > 1.0, ErrorCode::kInvalidArgument, op,
               ": base must be finite and > 1, got ", base);
  detail::check_matrix(op, "positions", "[1, n]", pos_size, 1, d.n);
  const int64_t need = d.n == 0 ? 0 : (d.n - 1) * d.row_stride + d.heads * d.head_dim;
  CPATTN_CHECK(static_cast<int64_t>(x_size) >= need, ErrorCode::kShapeMismatch, op,
               ": x must hold (n-1)*row_stride + heads*head_dim = ", need, " floats, got ", x_size);
}

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
void rotate(const char* op, const RopeDims& d, std::span<float> x,
            std::span<const int64_t> positions, double base, double sign) {
  check_args(op, d, x.size(), positions.size(), base);
  const int64_t half = d.head_dim / 2;
  for (int64_t r = 0; r < d.n; ++r) {
    float* row = x.data() + r * d.row_stride;
    const double pos = static_cast<double>(positions[static_cast<size_t>(r)]);
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq =
          std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d.head_dim));
      const double angle = pos * inv_freq;
      const float c = static_cast<float>(std::cos(angle));
      const float s = static_cast<float>(sign * std::sin(angle));
      for (int64_t h = 0; h < d.heads; ++h) {
        float* p = row + h * d.head_dim + 2 * i;
        const float a = p[0], b = p[1];
        p[0] = a * c - b * s;
        p[1] = a * s + b * c;
      }
    }
  }
}
}  // namespace

void rope_forward(RopeDims dims, std::span<float> x, std::span<const int64_t> positions,
                  double base) {
  rotate("rope_forward", dims, x, positions, base, 1.0);
}

void rope_backward(RopeDims dims, std::span<float> grad, std::span<const int64_t> positions,
                   double base) {
  rotate("rope_backward", dims, grad, positions, base, -1.0);
}

}  // namespace cpattn::train
