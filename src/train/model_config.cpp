// Validation of ModelConfig: one place that turns a bad shape into a message naming its values.
#include "train/model_config.h"

#include <cmath>

#include "cpattn/error.h"

namespace cpattn::train {

void validate_config(const ModelConfig& c) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(c.layers >= 1, kArg, "model layers must be >= 1, got ", c.layers);
  CPATTN_CHECK(c.d_model >= 1, kArg, "model d_model must be >= 1, got ", c.d_model);
  CPATTN_CHECK(c.heads >= 1, kArg, "model heads must be >= 1, got ", c.heads);
  CPATTN_CHECK(c.kv_heads >= 1, kArg, "model kv_heads must be >= 1, got ", c.kv_heads);
  CPATTN_CHECK(c.mlp_hidden >= 0, kArg, "model mlp_hidden must be >= 0 (0 = 4 * d_model), got ",
               c.mlp_hidden);
  CPATTN_CHECK(c.vocab >= 2, kArg, "model vocab must be >= 2, got ", c.vocab);
  CPATTN_CHECK(c.layers <= kMaxLayers, kArg, "model layers must be <= 2^16, got ", c.layers);
  for (const int64_t width : {c.d_model, c.heads, c.kv_heads, c.mlp_hidden, c.vocab}) {
    CPATTN_CHECK(width <= kMaxWidth, kArg,
                 "model widths (d_model, heads, kv_heads, mlp_hidden, vocab) must be <= 2^31, got ",
                 width);
  }
  CPATTN_CHECK(c.d_model % c.heads == 0, kArg, "heads must divide d_model: d_model = ", c.d_model,
               ", heads = ", c.heads);
  CPATTN_CHECK(c.heads % c.kv_heads == 0, kArg, "kv_heads must divide heads: heads = ", c.heads,
               ", kv_heads = ", c.kv_heads);
  CPATTN_CHECK(c.head_dim() % 2 == 0, kArg,
               "head_dim = d_model / heads must be even for rotary embeddings: d_model = ",
               c.d_model, ", heads = ", c.heads, ", head_dim = ", c.head_dim());
  CPATTN_CHECK(std::isfinite(c.rope_base) && c.rope_base > 1.0, kArg,
               "model rope_base must be finite and > 1, got ", c.rope_base);
  // Counted in double: with the bounds above every product is exact enough to compare.
  const auto d = static_cast<double>(c.d_model);
  const double per_layer = 2 * d + static_cast<double>(c.qkv_dim()) * d +
                           d * static_cast<double>(c.q_dim()) +
                           2 * static_cast<double>(c.hidden()) * d;
  const double params =
      2 * static_cast<double>(c.vocab) * d + d + static_cast<double>(c.layers) * per_layer;
  CPATTN_CHECK(params <= static_cast<double>(kMaxParams), kArg, "the model has ", params,
               " parameters, more than 2^36");
}

}  // namespace cpattn::train
