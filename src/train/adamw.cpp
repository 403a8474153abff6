// AdamW update, learning-rate schedule and gradient clipping.
#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "cpattn/error.h"
#include "train/vector_math.h"

namespace cpattn::train {

namespace {

// One step's AdamW constants for one parameter tensor (keep = 1 - lr * weight_decay, or 1 for
// tensors without decay).
struct AdamWUpdate {
  float beta1, beta2, step_size, inv_sqrt_bc2, eps, keep;
};

// One element's update, in place:
// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
// p = p keep - step_size m / (sqrt(v) / sqrt(bias_correction2) + eps)   (Loshchilov & Hutter).
inline void update_one(const AdamWUpdate& u, float& p, float g, float& m, float& v) {
  m = u.beta1 * m + (1.0f - u.beta1) * g;
  v = u.beta2 * v + (1.0f - u.beta2) * g * g;
  p = p * u.keep - u.step_size * m / (std::sqrt(v) * u.inv_sqrt_bc2 + u.eps);
}

CPATTN_TRAIN_VECTOR_CLONES
void update_params(const AdamWUpdate& u, float* p, const float* g, float* m, float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) update_one(u, p[i], g[i], m[i], v[i]);
}

// The constants of update t + 1 (after t updates), after checking that params and grads are
// the optimizer's shape (numel floats).
struct StepConstants {
  int64_t t;  // the update's number
  double lr;
  AdamWUpdate with_decay;
  AdamWUpdate update(const ParamInfo& info) const {
    AdamWUpdate u = with_decay;
    if (!info.decay) u.keep = 1.0f;
    return u;
  }
};

StepConstants step_constants(const AdamWConfig& c, int64_t t, const ModelParams& params,
                             const ModelGrads& grads, int64_t numel) {
  CPATTN_CHECK(params.numel() == numel && grads.numel() == numel, ErrorCode::kShapeMismatch,
               "AdamW::step: params and grads must hold ", numel,
               " floats (the optimizer's model), got ", params.numel(), " and ", grads.numel());
  const double lr = learning_rate(c, t);
  const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(t + 1));
  const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(t + 1));
  return {t + 1, lr,
          AdamWUpdate{static_cast<float>(c.beta1), static_cast<float>(c.beta2),
                      static_cast<float>(lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
                      static_cast<float>(c.eps), static_cast<float>(1.0 - lr * c.weight_decay)}};
}

// Whether update_params would leave every p, m and v finite (copies updated, nothing written).
CPATTN_TRAIN_VECTOR_CLONES
bool update_stays_finite(const AdamWUpdate& u, const float* p, const float* g, const float* m,
                         const float* v, size_t n) {
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    float pi = p[i], mi = m[i], vi = v[i];
    update_one(u, pi, g[i], mi, vi);
    finite &= std::isfinite(pi) && std::isfinite(mi) && std::isfinite(vi);
  }
  return finite;
}

}  // namespace

void validate_adamw(const AdamWConfig& c) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(std::isfinite(c.lr) && c.lr >= 0.0, kArg, "AdamW lr must be finite and >= 0, got ",
               c.lr);
  CPATTN_CHECK(c.beta1 >= 0.0 && c.beta1 < 1.0, kArg, "AdamW beta1 must be in [0, 1), got ",
               c.beta1);
  CPATTN_CHECK(c.beta2 >= 0.0 && c.beta2 < 1.0, kArg, "AdamW beta2 must be in [0, 1), got ",
               c.beta2);
  CPATTN_CHECK(c.eps > 0.0, kArg, "AdamW eps must be > 0, got ", c.eps);
  CPATTN_CHECK(c.weight_decay >= 0.0, kArg, "AdamW weight_decay must be >= 0, got ",
               c.weight_decay);
  CPATTN_CHECK(c.warmup_steps >= 0, kArg, "AdamW warmup_steps must be >= 0, got ", c.warmup_steps);
  CPATTN_CHECK(c.total_steps >= 1, kArg, "AdamW total_steps must be >= 1, got ", c.total_steps);
  CPATTN_CHECK(c.min_lr_ratio >= 0.0 && c.min_lr_ratio <= 1.0, kArg,
               "AdamW min_lr_ratio must be in [0, 1], got ", c.min_lr_ratio);
}

double learning_rate(const AdamWConfig& c, int64_t step) {
  CPATTN_CHECK(step >= 0, ErrorCode::kInvalidArgument, "learning_rate step must be >= 0, got ",
               step);
  if (step < c.warmup_steps) {
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  const double p = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double r = c.min_lr_ratio;
  return c.lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
}

namespace {
CPATTN_TRAIN_VECTOR_CLONES
double sum_of_squares(const float* g, size_t n) {
  return detail::ordered_sum(n, [&](size_t i) { return static_cast<double>(g[i]) * g[i]; });
}
}  // namespace

double grad_norm(const ModelGrads& grads) {
  const std::span<const float> g = grads.flat();
  return std::sqrt(sum_of_squares(g.data(), g.size()));
}

double clip_grad_norm(ModelGrads& grads, double max_norm) {
  CPATTN_CHECK(max_norm > 0.0, ErrorCode::kInvalidArgument,
               "clip_grad_norm max_norm must be > 0, got ", max_norm);
  const double norm = grad_norm(grads);
  if (!std::isfinite(norm)) {
    const ParamInfo* bad = grads.first_nonfinite();
    throw Error(ErrorCode::kNumeric,
                cpattn::detail::str_cat("clip_grad_norm: the gradient norm is ", norm,
                                        "; first non-finite value in ", bad ? bad->name : "?"));
  }
  if (norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / norm);
    for (float& g : grads.flat()) g *= scale;
  }
  return norm;
}

AdamW::AdamW(const ModelConfig& model, const AdamWConfig& config, MemoryCounter* counter)
    : config_(config) {
  validate_adamw(config);
  const std::vector<ParamInfo> table = param_table(model);
  const int64_t numel = table.back().offset + table.back().numel;
  m_ = allocate_floats(numel, counter, "the AdamW moments");
  v_ = allocate_floats(numel, counter, "the AdamW moments");
}

void AdamW::restore(int64_t t, std::span<const float> m, std::span<const float> v) {
  CPATTN_CHECK(t >= 0, ErrorCode::kInvalidArgument, "AdamW::restore: t must be >= 0, got ", t);
  CPATTN_CHECK(
      static_cast<int64_t>(m.size()) == m_.numel() && static_cast<int64_t>(v.size()) == v_.numel(),
      ErrorCode::kShapeMismatch, "AdamW::restore: moments must hold ", m_.numel(), " floats, got ",
      m.size(), " and ", v.size());
  std::copy(m.begin(), m.end(), m_.data());
  std::copy(v.begin(), v.end(), v_.data());
  t_ = t;
}

double AdamW::step(ModelParams& params, const ModelGrads& grads) {
  const StepConstants n = step_constants(config_, t_, params, grads, m_.numel());
  float* p = params.flat().data();
  const float* g = grads.flat().data();
  for (const ParamInfo& info : params.infos()) {
    const auto at = static_cast<size_t>(info.offset);
    update_params(n.update(info), p + at, g + at, m_.data() + at, v_.data() + at,
                  static_cast<size_t>(info.numel));
  }
  t_ = n.t;
  return n.lr;
}

std::string AdamW::nonfinite_update(const ModelParams& params, const ModelGrads& grads) const {
  const StepConstants n = step_constants(config_, t_, params, grads, m_.numel());
  const float* p = params.flat().data();
  const float* g = grads.flat().data();
  for (const ParamInfo& info : params.infos()) {
    const auto at = static_cast<size_t>(info.offset);
    if (!update_stays_finite(n.update(info), p + at, g + at, m_.data() + at, v_.data() + at,
                             static_cast<size_t>(info.numel))) {
      return cpattn::detail::str_cat("the AdamW update at lr ", n.lr, " would make ", info.name,
                                     " non-finite");
    }
  }
  return {};
}

}  // namespace cpattn::train
