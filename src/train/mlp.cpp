// GELU (tanh) and the MLP block built from two Linear calls around it.
#include "train/mlp.h"

#include "cpattn/error.h"
#include "train/check.h"
#include "train/linear.h"
#include "train/vector_math.h"

namespace cpattn::train {

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

void check_same(const char* op, const char* name, size_t got, size_t want) {
  CPATTN_CHECK(got == want, ErrorCode::kShapeMismatch, op, ": ", name, " must hold ", want,
               " floats (the size of x), got ", got);
}

void check_dims(const char* op, const MlpDims& d) {
  detail::check_at_least(op, "N", d.n, 0);
  detail::check_at_least(op, "d_model", d.d_model, 1);
  detail::check_at_least(op, "hidden", d.hidden, 1);
}

// (1 + tanh(u)) / 2 = sigmoid(2u) = 1 / (1 + e^(-2u)) with u = sqrt(2/pi) (v + 0.044715 v^3): one
// exp instead of a tanh, and an inline one (vector_math.h) so the GELU loops vectorize; with
// libm's expf and tanhf GELU took a sixth and a third of the training job's time
// (docs/performance.md, "The main job"). Where e^(-2u) exceeds e^88 (v < -9.4) the gate is
// exactly 0, as 1 / (1 + inf) would be: exp_vectorizable stops at e^88, and a gate held at
// 1 / (1 + e^88) would make the backward's v s (1 - s) du grow like v^3 (wrong by 1 at v = -1e13).
inline float gelu_gate(float v) {
  const float u = kGeluC * (v + kGeluA * v * v * v);
  const float t = -2.0f * u;
  return t > 88.0f ? 0.0f : 1.0f / (1.0f + detail::exp_vectorizable(t));
}

CPATTN_TRAIN_VECTOR_CLONES
void gelu_forward_loop(const float* x, float* y, size_t n) {
  CPATTN_TRAIN_ELEMENTWISE
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * gelu_gate(x[i]);
}

// d/dv [v s] = s + v s (1 - s) 2 du/dv with s = sigmoid(2u): (1 - tanh^2 u) / 2 = 2 s (1 - s).
CPATTN_TRAIN_VECTOR_CLONES
void gelu_backward_loop(const float* dy, const float* x, float* dx, size_t n) {
  CPATTN_TRAIN_ELEMENTWISE
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float s = gelu_gate(v);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}
}  // namespace

void gelu_forward(std::span<const float> x, std::span<float> y) {
  check_same("gelu_forward", "y", y.size(), x.size());
  gelu_forward_loop(x.data(), y.data(), x.size());
}

void gelu_backward(std::span<const float> dy, std::span<const float> x, std::span<float> dx) {
  check_same("gelu_backward", "dy", dy.size(), x.size());
  check_same("gelu_backward", "dx", dx.size(), x.size());
  gelu_backward_loop(dy.data(), x.data(), dx.data(), x.size());
}

MlpCache mlp_forward(MlpDims d, std::span<const float> x, std::span<const float> w1,
                     std::span<const float> w2, std::span<float> y, MemoryCounter* counter) {
  check_dims("mlp_forward", d);
  // Both written whole before they are read, as is grad_hidden below.
  MlpCache cache{Tensor::uninitialized({d.n, d.hidden}, DType::kF32, counter),
                 Tensor::uninitialized({d.n, d.hidden}, DType::kF32, counter)};
  linear_forward({d.n, d.d_model, d.hidden}, x, w1, {}, cache.pre.span());
  gelu_forward(cache.pre.span(), cache.act.span());
  linear_forward({d.n, d.hidden, d.d_model}, cache.act.span(), w2, {}, y);
  return cache;
}

void mlp_backward(MlpDims d, std::span<const float> dy, std::span<const float> x,
                  std::span<const float> w1, std::span<const float> w2, const MlpCache& cache,
                  std::span<float> dx, std::span<float> dw1, std::span<float> dw2,
                  MemoryCounter* counter) {
  constexpr const char* kOp = "mlp_backward";
  check_dims(kOp, d);
  detail::check_matrix(kOp, "cache.pre", "[N, hidden]", cache.pre.span().size(), d.n, d.hidden);
  detail::check_matrix(kOp, "cache.act", "[N, hidden]", cache.act.span().size(), d.n, d.hidden);
  Tensor grad_hidden =  // dact, then dpre in place
      Tensor::uninitialized({d.n, d.hidden}, DType::kF32, counter);
  linear_backward({d.n, d.hidden, d.d_model}, dy, cache.act.span(), w2, grad_hidden.span(), dw2,
                  {});
  gelu_backward(grad_hidden.span(), cache.pre.span(), grad_hidden.span());
  linear_backward({d.n, d.d_model, d.hidden}, grad_hidden.span(), x, w1, dx, dw1, {});
}

}  // namespace cpattn::train
