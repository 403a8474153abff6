// The fp32 merge of partial attention results (out, lse) over disjoint key sets.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpattn/error.h"
#include "cpattn/ring.h"

namespace cpattn {

float merge_lse(float lse_a, float lse_b) {
  // std::max(-inf, NaN) is -inf: without this a NaN partial would be dropped as an empty one.
  if (std::isnan(lse_a) || std::isnan(lse_b)) return std::numeric_limits<float>::quiet_NaN();
  const float m = std::max(lse_a, lse_b);
  // Both empty: -inf - -inf would be NaN, so the identity is handled first.
  if (m == -std::numeric_limits<float>::infinity()) return m;
  const float lo = std::min(lse_a, lse_b);
  // log(exp(a - m) + exp(b - m)) with one term exp(0) = 1: log1p keeps the small term exact.
  return m + std::log1p(std::exp(lo - m));
}

void merge_attention_partials(View out_acc, std::span<float> lse_acc, ConstView out_part,
                              std::span<const float> lse_part) {
  const auto& sh = out_acc.shape;
  CPATTN_CHECK(out_part.shape == sh, ErrorCode::kShapeMismatch,
               "merge_attention_partials: partial out shape differs from the accumulator's");
  const size_t rows = static_cast<size_t>(sh[0] * sh[1] * sh[2]);
  CPATTN_CHECK_EQ(lse_acc.size(), rows, ErrorCode::kShapeMismatch,
                  "merge_attention_partials: lse_acc length (B * H * S)");
  CPATTN_CHECK_EQ(lse_part.size(), rows, ErrorCode::kShapeMismatch,
                  "merge_attention_partials: lse_part length (B * H * S)");
  const int64_t B = sh[0], S = sh[1], H = sh[2], Dv = sh[3];
  // Rows in (b, i, h) order: the memory order of a dense BSHD tensor.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const size_t row = static_cast<size_t>((b * H + h) * S + i);
        const float a = lse_acc[row];
        const float c = lse_part[row];
        const float lse = merge_lse(a, c);
        if (lse == -std::numeric_limits<float>::infinity()) continue;
        // exp(-inf - lse) = 0, so an empty side contributes nothing.
        const float wa = std::exp(a - lse);
        const float wc = std::exp(c - lse);
        float* acc = &out_acc(b, i, h, 0);
        const float* part = &out_part(b, i, h, 0);
        const int64_t sa = out_acc.stride[3], sp = out_part.stride[3];
        for (int64_t d = 0; d < Dv; ++d) acc[d * sa] = acc[d * sa] * wa + part[d * sp] * wc;
        lse_acc[row] = lse;
      }
    }
  }
}

}  // namespace cpattn
