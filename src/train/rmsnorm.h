// RMSNorm (Zhang & Sennrich 2019) with a learned gain, per token row, and its backward.
#pragma once

#include <cstdint>
#include <span>

namespace cpattn::train {

/// Computes, for each row n of x [N, d]:
///   r_n = 1 / sqrt(mean_i x[n, i]^2 + kRmsNormEps),  y[n, i] = g[i] * x[n, i] * r_n
/// \param[in]  x     [N, d]
/// \param[in]  gain  [d]
/// \param[out] y     [N, d] (overwritten; must not alias x)
/// The sum of squares is accumulated in double in a fixed order (eight partial sums,
/// vector_math.h ordered_sum), so a row's result depends only on that row (bitwise the same on
/// any CP shard). Throws Error(kShapeMismatch) on a size
/// mismatch, kInvalidArgument on n < 0 or d < 1.
void rmsnorm_forward(int64_t n, int64_t d, std::span<const float> x, std::span<const float> gain,
                     std::span<float> y);

/// Backward of rmsnorm_forward given dy [N, d], with xhat = x * r_n (r_n recomputed from x):
///   dx[n, i] = r_n * (g[i] dy[n, i] - xhat[n, i] * mean_j g[j] dy[n, j] xhat[n, j])  (overwritten)
///   dgain[i] += sum_n dy[n, i] * xhat[n, i]                                          (accumulated)
/// dx may alias dy. Throws like rmsnorm_forward.
void rmsnorm_backward(int64_t n, int64_t d, std::span<const float> dy, std::span<const float> x,
                      std::span<const float> gain, std::span<float> dx, std::span<float> dgain);

}  // namespace cpattn::train
