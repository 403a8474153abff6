// The feed-forward block: Linear(d -> hidden) -> GELU (tanh approximation) -> Linear(hidden -> d),
// no biases, per token row; and the activation's own forward/backward.
#pragma once

#include <cstdint>
#include <span>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"

namespace cpattn::train {

/// GELU, tanh approximation (Hendrycks & Gimpel 2016; as in GPT-2), elementwise:
///   y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
/// y must have x's size (may alias x). Throws Error(kShapeMismatch) otherwise.
void gelu_forward(std::span<const float> x, std::span<float> y);

/// Backward of gelu_forward, elementwise:
///   dx = dy * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)),  t = tanh(u)
/// dx may alias dy. Throws Error(kShapeMismatch) when sizes differ.
void gelu_backward(std::span<const float> dy, std::span<const float> x, std::span<float> dx);

/// Sizes of an MLP call: n >= 0 token rows, d_model >= 1, hidden >= 1.
struct MlpDims {
  int64_t n = 0;
  int64_t d_model = 0;
  int64_t hidden = 0;
};

/// What mlp_backward needs from the forward: both [N, hidden], counted Tensors.
struct MlpCache {
  Tensor pre;  ///< x W1^T (GELU input)
  Tensor act;  ///< gelu(pre) (W2 input)
};

/// Computes: y = gelu(x W1^T) W2^T.
/// \param[in]  x   [N, d_model]
/// \param[in]  w1  [hidden, d_model]
/// \param[in]  w2  [d_model, hidden]
/// \param[out] y   [N, d_model] (overwritten)
/// \return the activations for mlp_backward, counted in `counter` (process_memory() if null).
/// Throws Error(kShapeMismatch) on a size mismatch, kInvalidArgument on bad dims.
MlpCache mlp_forward(MlpDims dims, std::span<const float> x, std::span<const float> w1,
                     std::span<const float> w2, std::span<float> y,
                     MemoryCounter* counter = nullptr);

/// Backward of mlp_forward given dy [N, d_model]:
///   dact = dy W2;  dpre = gelu'(pre) * dact;  dx = dpre W1   (dx overwritten)
///   dw2 += dy^T act;  dw1 += dpre^T x                         (accumulated)
/// Allocates one [N, hidden] scratch tensor (counted in `counter`). Throws like mlp_forward,
/// and Error(kShapeMismatch) when the cache does not have shape [N, hidden].
void mlp_backward(MlpDims dims, std::span<const float> dy, std::span<const float> x,
                  std::span<const float> w1, std::span<const float> w2, const MlpCache& cache,
                  std::span<float> dx, std::span<float> dw1, std::span<float> dw2,
                  MemoryCounter* counter = nullptr);

}  // namespace cpattn::train
