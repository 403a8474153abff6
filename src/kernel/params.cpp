// The one validation of AttentionParams (params.h) and the names of the slice types.
#include "cpattn/params.h"

#include <cmath>
#include <limits>

#include "cpattn/error.h"
#include "cpattn/mask.h"

namespace cpattn {
namespace {

// A per-head array of the whole call: empty, or one finite value per query head.
// One finite value per query head, each of magnitude <= max_magnitude, or none.
void check_per_head(const std::vector<float>& values, int64_t num_heads, const char* name,
                    float max_magnitude, const char* why) {
  if (values.empty()) return;
  CPATTN_CHECK(static_cast<int64_t>(values.size()) == num_heads, ErrorCode::kShapeMismatch, name,
               " must have one value per query head of the call, Hq = ", num_heads, ", got ",
               values.size());
  for (size_t h = 0; h < values.size(); ++h) {
    CPATTN_CHECK(std::isfinite(values[h]), ErrorCode::kInvalidArgument, name, "[", h,
                 "] must be finite, got ", values[h]);
    CPATTN_CHECK(std::fabs(values[h]) <= max_magnitude, ErrorCode::kInvalidArgument, name, "[", h,
                 "] must be within +-", max_magnitude, why, ", got ", values[h]);
  }
}

void check_slice(const MaskSlice& s, size_t index) {
  CPATTN_CHECK(s.q_begin >= 0 && s.q_end >= s.q_begin && s.k_begin >= 0 && s.k_end >= s.k_begin,
               ErrorCode::kInvalidArgument, "slice ", index,
               " must have 0 <= q_begin <= q_end and 0 <= k_begin <= k_end, got q [", s.q_begin,
               ", ", s.q_end, "), k [", s.k_begin, ", ", s.k_end, ")");
  CPATTN_CHECK(std::string_view(slice_type_name(s.type)) != "?", ErrorCode::kInvalidArgument,
               "slice ", index, " has type ", static_cast<int>(s.type), ", which is none of ",
               "full, causal, inv_causal, bi_causal");
}

}  // namespace

const char* slice_type_name(SliceType type) noexcept {
  switch (type) {
    case SliceType::kFull:
      return "full";
    case SliceType::kCausal:
      return "causal";
    case SliceType::kInverseCausal:
      return "inv_causal";
    case SliceType::kBiCausal:
      return "bi_causal";
  }
  return "?";
}

SliceType parse_slice_type(std::string_view name) {
  for (const SliceType t :
       {SliceType::kFull, SliceType::kCausal, SliceType::kInverseCausal, SliceType::kBiCausal}) {
    if (name == slice_type_name(t)) return t;
  }
  throw Error(ErrorCode::kInvalidArgument,
              detail::str_cat("unknown slice type ", detail::quoted(name),
                              " (expected full, causal, inv_causal or bi_causal)"));
}

AttentionParams resolve_params(const AttentionParams& params, int64_t head_dim_qk,
                               int64_t num_heads) {
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
  // The kernel's capped score (docs/design.md section 3) takes 1 / softcap, the scale over the
  // cap and products of about 1000 softcap in fp32: all finite in this range.
  CPATTN_CHECK(p.softcap == 0.0f || (p.softcap >= kMinSoftcap && p.softcap <= kMaxSoftcap &&
                                     std::isfinite(0.5f * *p.softmax_scale / p.softcap)),
               ErrorCode::kInvalidArgument, "softcap must be 0 (off) or in [2^-60, 2^60] with ",
               "softmax_scale / softcap finite in fp32, got softcap ", p.softcap,
               " and softmax_scale ", *p.softmax_scale);
  check_per_head(p.alibi_slopes, num_heads, "alibi_slopes", kMaxAlibiSlope,
                 " (2^60: slope x distance stays finite in fp32 for any int64 positions)");
  check_per_head(p.sink, num_heads, "sink", std::numeric_limits<float>::max(), "");
  for (size_t i = 0; i < p.slices.size(); ++i) check_slice(p.slices[i], i);
  check_slices_disjoint(p.slices);
  return p;
}

}  // namespace cpattn
