// Cross-entropy forward/backward: log-sum-exp with float exps (one per logit) summed in double.
#include "train/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpattn/error.h"
#include "train/check.h"
#include "train/vector_math.h"

namespace cpattn::train {

namespace {
void check_args(const char* op, int64_t vocab, size_t logits_size, std::span<const int32_t> targets,
                int64_t total_count) {
  detail::check_at_least(op, "vocab", vocab, 1);
  const auto n = static_cast<int64_t>(targets.size());
  detail::check_matrix(op, "logits", "[N, vocab]", logits_size, n, vocab);
  CPATTN_CHECK(total_count >= 1 && total_count >= n, ErrorCode::kInvalidArgument, op,
               ": total_count must be >= max(1, N) = ", std::max<int64_t>(1, n), ", got ",
               total_count);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = targets[static_cast<size_t>(r)];
    CPATTN_CHECK(t >= 0 && t < vocab, ErrorCode::kInvalidArgument, op, ": target ", t, " at row ",
                 r, " is outside [0, ", vocab, ")");
  }
}

// Fills e[v] = exp(l[v] - m), m = max_v l[v], and returns (m, sum_v e[v]): the terms of one
// row's log-sum-exp, shared by the forward and the backward (one exp per logit). l[v] - m and its
// exp are float, so the loop vectorizes (libm's double exp was a call per logit); the sum and the
// log are double, the sum in ordered_sum's fixed order. The error bound is in cross_entropy.h.
struct RowExps {
  double max;
  double sum;
  double lse() const { return max + std::log(sum); }
};
CPATTN_TRAIN_VECTOR_CLONES
void shifted_exps(const float* l, int64_t vocab, float m, float* e) {
  for (int64_t v = 0; v < vocab; ++v) e[v] = detail::exp_vectorizable(l[v] - m);
}
RowExps row_exps(const float* l, int64_t vocab, float* e) {
  const float m = *std::max_element(l, l + vocab);
  shifted_exps(l, vocab, m, e);
  const double s =
      detail::ordered_sum(static_cast<size_t>(vocab), [e](size_t v) { return double{e[v]}; });
  return {m, s};
}
}  // namespace

double cross_entropy_forward(int64_t vocab, std::span<const float> logits,
                             std::span<const int32_t> targets, int64_t total_count) {
  check_args("cross_entropy_forward", vocab, logits.size(), targets, total_count);
  std::vector<float> e(static_cast<size_t>(vocab));
  double sum = 0.0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* l = logits.data() + static_cast<int64_t>(r) * vocab;
    const RowExps row = row_exps(l, vocab, e.data());
    sum += row.lse() - static_cast<double>(l[targets[r]]);
  }
  return sum / static_cast<double>(total_count);
}

double cross_entropy_backward(int64_t vocab, std::span<const float> logits,
                              std::span<const int32_t> targets, int64_t total_count, float dloss,
                              std::span<float> dlogits) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_args(kOp, vocab, logits.size(), targets, total_count);
  detail::check_matrix(kOp, "dlogits", "[N, vocab]", dlogits.size(),
                       static_cast<int64_t>(targets.size()), vocab);
  const double scale = static_cast<double>(dloss) / static_cast<double>(total_count);
  std::vector<float> e(static_cast<size_t>(vocab));
  double sum = 0.0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* l = logits.data() + static_cast<int64_t>(r) * vocab;
    float* g = dlogits.data() + static_cast<int64_t>(r) * vocab;
    const RowExps row = row_exps(l, vocab, e.data());
    const int32_t t = targets[r];
    sum += row.lse() - static_cast<double>(l[t]);  // before g overwrites l
    const double inv_sum = 1.0 / row.sum;
    for (int64_t v = 0; v < vocab; ++v) {
      const double p = e[static_cast<size_t>(v)] * inv_sum;
      g[v] = static_cast<float>(scale * (p - (v == t ? 1.0 : 0.0)));
    }
  }
  return sum / static_cast<double>(total_count);
}

}  // namespace cpattn::train
