// ModelConfig: the shape of the byte-level decoder-only transformer trained by `cpattn train`,
// and its validation (every other train/ function assumes a validated config).
#pragma once

#include <cstdint>

namespace cpattn::train {

/// RMSNorm epsilon (added to mean(x^2) before the square root).
inline constexpr float kRmsNormEps = 1e-5f;

/// Shape of the model. Pre-norm layers (Llama-style, no biases anywhere):
///   h = x + Wo * attn(rope(q), rope(k), v),  [q | k | v] = Wqkv * rmsnorm(x; g_attn)
///   y = h + W2 * gelu_tanh(W1 * rmsnorm(h; g_mlp))
/// then logits = W_lm * rmsnorm(y_last; g_final) (untied from the embedding).
struct ModelConfig {
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;       ///< query heads; head_dim = d_model / heads
  int64_t kv_heads = 4;    ///< key/value heads (GQA when < heads, MQA when 1)
  int64_t mlp_hidden = 0;  ///< MLP hidden width; 0 means 4 * d_model
  int64_t vocab = 256;     ///< 256 for byte-level text; tests may use fewer
  double rope_base = 10000.0;
  uint64_t seed = 0;  ///< parameter-init seed

  int64_t head_dim() const { return d_model / heads; }
  int64_t hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * d_model; }
  int64_t q_dim() const { return heads * head_dim(); }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  /// Width of the fused QKV projection's output: one row is [q (heads x D) | k | v (kv_heads x D)].
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
};

/// The largest model validate_config accepts: layers, and every width (d_model, heads, kv_heads,
/// mlp_hidden, vocab), and the number of parameters (2^36 floats, 256 GiB). Far above what one
/// CPU trains; they keep every size computation exact (no int64 overflow) and bounded.
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;
inline constexpr int64_t kMaxWidth = int64_t{1} << 31;
inline constexpr int64_t kMaxParams = int64_t{1} << 36;

/// Throws Error(kInvalidArgument) naming the offending values when: layers, d_model, heads,
/// kv_heads < 1; mlp_hidden < 0; vocab < 2; heads does not divide d_model; kv_heads does not
/// divide heads; head_dim is odd (RoPE rotates pairs); rope_base <= 1 or not finite; layers >
/// kMaxLayers, a width > kMaxWidth, or more than kMaxParams parameters.
void validate_config(const ModelConfig& config);

}  // namespace cpattn::train
