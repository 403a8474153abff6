// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019) over the flat
// parameter buffer, its learning-rate schedule, and global gradient-norm clipping.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"
#include "train/model_params.h"

namespace cpattn::train {

/// Optimizer settings. Weight decay applies only to ParamInfo::decay tensors (matrices: the
/// embedding, projections and LM head), never to RMSNorm gains.
struct AdamWConfig {
  double lr = 3e-3;  ///< peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  int64_t warmup_steps = 0;   ///< linear warmup length
  int64_t total_steps = 1;    ///< end of the cosine decay
  double min_lr_ratio = 0.1;  ///< the cosine ends at lr * min_lr_ratio
};

/// Throws Error(kInvalidArgument) naming the value when: lr < 0 or not finite; beta1 or beta2
/// outside [0, 1); eps <= 0; weight_decay < 0; warmup_steps < 0; total_steps < 1;
/// min_lr_ratio outside [0, 1].
void validate_adamw(const AdamWConfig& config);

/// Learning rate of 0-based update `step`, with W = warmup_steps, T = total_steps,
/// r = min_lr_ratio:
///   step < W:   lr * (step + 1) / W                                (linear warmup)
///   otherwise:  lr * (r + (1 - r) * 0.5 * (1 + cos(pi * p))),
///               p = min(1, (step - W) / max(1, T - W))             (cosine down to r * lr at T)
/// and r * lr after T. Throws Error(kInvalidArgument) when step < 0.
double learning_rate(const AdamWConfig& config, int64_t step);

/// sqrt(sum g^2) over every gradient, accumulated in double in a fixed order over the flat
/// gradients (eight partial sums, vector_math.h ordered_sum: deterministic).
double grad_norm(const ModelGrads& grads);

/// Scales all gradients by max_norm / norm when norm = grad_norm(grads) > max_norm; returns norm
/// (before clipping). Throws Error(kInvalidArgument) when max_norm <= 0, and when norm is not
/// finite (NaN compares false with max_norm and would reach the optimizer unclipped; the message
/// names the first tensor holding a non-finite value).
double clip_grad_norm(ModelGrads& grads, double max_norm);

/// AdamW with first/second moments in counted fp32 tensors shaped like the flat parameters.
/// One update t = 1, 2, ... with lr_t = learning_rate(config, t - 1), for every element:
///   p <- p * (1 - lr_t * wd)                     (decay tensors only; decoupled decay)
///   m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
///   p <- p - (lr_t / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// (PyTorch's torch.optim.AdamW formulation). Elementwise with no reductions, so two ranks with
/// equal params and grads stay bitwise equal.
class AdamW {
 public:
  /// Throws what validate_adamw and validate_config throw.
  AdamW(const ModelConfig& model, const AdamWConfig& config, MemoryCounter* counter = nullptr);

  /// Applies one update to params from grads (which it does not modify) and returns lr_t.
  /// Throws Error(kShapeMismatch) when params or grads were built from another ModelConfig shape.
  double step(ModelParams& params, const ModelGrads& grads);

  /// Why step(params, grads) would leave a non-finite weight or moment ("the AdamW update at lr
  /// L would make <tensor> non-finite": a learning rate whose step overflows float, for one),
  /// or "" when every updated value is finite. Reads only; the same arithmetic as step(), so
  /// a run can refuse such an update before it destroys the last finite weights. Throws as
  /// step().
  std::string nonfinite_update(const ModelParams& params, const ModelGrads& grads) const;

  /// Updates taken so far (t of the last update).
  int64_t steps_taken() const { return t_; }
  const AdamWConfig& config() const { return config_; }
  /// The moments m and v, flat in ModelParams order (a checkpoint saves them).
  std::span<const float> first_moment() const { return m_.span(); }
  std::span<const float> second_moment() const { return v_.span(); }
  /// Continues from a saved state: t updates taken, moments m and v. Afterwards step() behaves
  /// bitwise as it would have in the run that saved them. Throws Error(kShapeMismatch) when m or
  /// v do not hold the optimizer's number of floats, Error(kInvalidArgument) when t < 0.
  void restore(int64_t t, std::span<const float> m, std::span<const float> v);

 private:
  AdamWConfig config_;
  Tensor m_;
  Tensor v_;
  int64_t t_ = 0;
};

}  // namespace cpattn::train
