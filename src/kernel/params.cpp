// The one validation of AttentionParams (params.h).
#include "cpattn/params.h"

#include <cmath>

#include "cpattn/error.h"

namespace cpattn {

AttentionParams resolve_params(const AttentionParams& params, int64_t head_dim_qk) {
  AttentionParams p = params;
  if (p.softmax_scale.has_value()) {
    CPATTN_CHECK(std::isfinite(*p.softmax_scale), ErrorCode::kInvalidArgument,
                 "softmax_scale must be finite, got ", *p.softmax_scale);
  } else {
    CPATTN_CHECK(head_dim_qk > 0, ErrorCode::kInvalidArgument,
                 "the default softmax_scale 1/sqrt(Dqk) needs Dqk > 0, got Dqk = ", head_dim_qk,
                 " (give softmax_scale)");
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim_qk));
  }
  // Written so that NaN fails too.
  CPATTN_CHECK(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, ErrorCode::kInvalidArgument,
               "dropout_p must be in [0, 1), got ", p.dropout_p);
  CPATTN_CHECK(p.window_left >= -1, ErrorCode::kInvalidArgument,
               "window_left must be >= -1 (-1 = unbounded), got ", p.window_left);
  CPATTN_CHECK(p.window_right >= -1, ErrorCode::kInvalidArgument,
               "window_right must be >= -1 (-1 = unbounded), got ", p.window_right);
  return p;
}

}  // namespace cpattn
