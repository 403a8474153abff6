// Cross-entropy forward/backward with log-sum-exp in double.
#include "train/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "cpattn/error.h"
#include "train/check.h"

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

// (max, log sum exp(l - max)) of one row, in double.
double row_lse(const float* l, int64_t vocab) {
  const double m = *std::max_element(l, l + vocab);
  double s = 0.0;
  for (int64_t v = 0; v < vocab; ++v) s += std::exp(static_cast<double>(l[v]) - m);
  return m + std::log(s);
}
}  // namespace

double cross_entropy_forward(int64_t vocab, std::span<const float> logits,
                             std::span<const int32_t> targets, int64_t total_count) {
  check_args("cross_entropy_forward", vocab, logits.size(), targets, total_count);
  double sum = 0.0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* l = logits.data() + static_cast<int64_t>(r) * vocab;
    sum += row_lse(l, vocab) - static_cast<double>(l[targets[r]]);
  }
  return sum / static_cast<double>(total_count);
}

void cross_entropy_backward(int64_t vocab, std::span<const float> logits,
                            std::span<const int32_t> targets, int64_t total_count, float dloss,
                            std::span<float> dlogits) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_args(kOp, vocab, logits.size(), targets, total_count);
  detail::check_matrix(kOp, "dlogits", "[N, vocab]", dlogits.size(),
                       static_cast<int64_t>(targets.size()), vocab);
  const double scale = static_cast<double>(dloss) / static_cast<double>(total_count);
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* l = logits.data() + static_cast<int64_t>(r) * vocab;
    float* g = dlogits.data() + static_cast<int64_t>(r) * vocab;
    const double lse = row_lse(l, vocab);
    const int32_t t = targets[r];
    for (int64_t v = 0; v < vocab; ++v) {
      const double p = std::exp(static_cast<double>(l[v]) - lse);
      g[v] = static_cast<float>(scale * (p - (v == t ? 1.0 : 0.0)));
    }
  }
}

}  // namespace cpattn::train
