// Linear layer y = x W^T (+ b) on token rows through the trainer's sgemm (blas.h: oneDNN), with
// its hand-written backward.
#pragma once

#include <cstdint>
#include <span>

namespace cpattn::train {

/// Sizes of a Linear call: n >= 0 token rows, in >= 1 features -> out >= 1 features.
struct LinearDims {
  int64_t n = 0;
  int64_t in = 0;
  int64_t out = 0;
};

/// Computes: y[n, o] = sum_i x[n, i] * w[o, i] + b[o]   (PyTorch nn.Linear layout).
/// \param[in]  x  [N, in] row-major
/// \param[in]  w  [out, in] row-major
/// \param[in]  b  [out], or empty for no bias
/// \param[out] y  [N, out] (overwritten)
/// Rows are independent, so any subset of a sequence's tokens (a CP shard) can be passed.
/// Throws Error(kShapeMismatch) when a span's size disagrees with dims, kInvalidArgument on n < 0,
/// in < 1 or out < 1.
void linear_forward(LinearDims dims, std::span<const float> x, std::span<const float> w,
                    std::span<const float> b, std::span<float> y);

/// Backward of linear_forward given dy = dL/dy [N, out]:
///   dx[n, i] = sum_o dy[n, o] w[o, i]     (overwritten; skipped when dx is empty)
///   dw[o, i] += sum_n dy[n, o] x[n, i]     (accumulated)
///   db[o]    += sum_n dy[n, o]             (accumulated; skipped when db is empty)
/// Throws like linear_forward.
void linear_backward(LinearDims dims, std::span<const float> dy, std::span<const float> x,
                     std::span<const float> w, std::span<float> dx, std::span<float> dw,
                     std::span<float> db);

}  // namespace cpattn::train
