// RoPE's angle table, forward (rotate by +angle) and backward (rotate by -angle), interleaved
// pairs.
#include "train/rope.h"

#include <cmath>

#include "cpattn/error.h"
#include "train/check.h"

namespace cpattn::train {

RopeTable::RopeTable(std::span<const int64_t> positions, int64_t head_dim, double base)
    : rows_(static_cast<int64_t>(positions.size())), head_dim_(head_dim) {
  constexpr const char* kOp = "RopeTable";
  detail::check_at_least(kOp, "head_dim", head_dim, 2);
  CPATTN_CHECK(head_dim % 2 == 0, ErrorCode::kInvalidArgument, kOp, ": head_dim must be even, got ",
               head_dim);
  CPATTN_CHECK(std::isfinite(base) && base > 1.0, ErrorCode::kInvalidArgument, kOp,
               ": base must be finite and > 1, got ", base);
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  cos_.resize(static_cast<size_t>(rows_ * half));
  sin_.resize(cos_.size());
  for (int64_t r = 0; r < rows_; ++r) {
    const double pos = static_cast<double>(positions[static_cast<size_t>(r)]);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[static_cast<size_t>(i)];
      const auto at = static_cast<size_t>(r * half + i);
      cos_[at] = static_cast<float>(std::cos(angle));
      sin_[at] = static_cast<float>(std::sin(angle));
    }
  }
}

namespace {

void check_args(const char* op, const RopeDims& d, size_t x_size, const RopeTable& table) {
  detail::check_at_least(op, "n", d.n, 0);
  detail::check_at_least(op, "heads", d.heads, 1);
  CPATTN_CHECK(d.head_dim == table.head_dim() && d.n == table.rows(), ErrorCode::kShapeMismatch, op,
               ": the table holds ", table.rows(), " rows of head_dim ", table.head_dim(),
               ", the call has ", d.n, " rows of head_dim ", d.head_dim);
  CPATTN_CHECK(d.row_stride >= d.heads * d.head_dim, ErrorCode::kInvalidArgument, op,
               ": row_stride must be >= heads * head_dim = ", d.heads * d.head_dim, ", got ",
               d.row_stride);
  const int64_t need = d.n == 0 ? 0 : (d.n - 1) * d.row_stride + d.heads * d.head_dim;
  CPATTN_CHECK(static_cast<int64_t>(x_size) >= need, ErrorCode::kShapeMismatch, op,
               ": x must hold (n-1)*row_stride + heads*head_dim = ", need, " floats, got ", x_size);
}

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
void rotate(const char* op, const RopeDims& d, std::span<float> x, const RopeTable& table,
            float sign) {
  check_args(op, d, x.size(), table);
  const int64_t half = d.head_dim / 2;
  for (int64_t r = 0; r < d.n; ++r) {
    float* row = x.data() + r * d.row_stride;
    const float* cos = table.cos_row(r);
    const float* sin = table.sin_row(r);
    for (int64_t h = 0; h < d.heads; ++h) {
      float* head = row + h * d.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos[i], s = sign * sin[i];
        const float a = head[2 * i], b = head[2 * i + 1];
        head[2 * i] = a * c - b * s;
        head[2 * i + 1] = a * s + b * c;
      }
    }
  }
}

}  // namespace

void rope_forward(RopeDims dims, std::span<float> x, const RopeTable& table) {
  rotate("rope_forward", dims, x, table, 1.0f);
}

void rope_backward(RopeDims dims, std::span<float> grad, const RopeTable& table) {
  rotate("rope_backward", dims, grad, table, -1.0f);
}

}  // namespace cpattn::train
