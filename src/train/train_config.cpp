// Validation of TrainConfig, the held-out split and the list of a run's settings.
#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "cpattn/params.h"
#include "train/model.h"

namespace cpattn::train {

const char* nonfinite_policy_name(NonFinitePolicy policy) {
  return policy == NonFinitePolicy::kSkip ? "skip" : "stop";
}

TextSplit split_text(const TrainConfig& config, int64_t text_size) {
  if (config.eval_every == 0) return {text_size, 0};
  const int64_t held = std::max(config.seq_len + 1, text_size / kHeldOutDivisor);
  return {text_size - held, held};
}

void validate_train_config(TrainConfig& config, std::span<const uint8_t> text) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(config.cp >= 1, kArg, "--cp must be >= 1, got ", config.cp);
  CPATTN_CHECK(config.seq_len >= config.cp, kArg, "--seq must be >= --cp so every rank holds a ",
               "token, got seq ", config.seq_len, " and cp ", config.cp);
  CPATTN_CHECK(config.batch >= 1, kArg, "--batch must be >= 1, got ", config.batch);
  CPATTN_CHECK(config.seq_len <= kMaxStepTokens && config.batch <= kMaxStepTokens / config.seq_len,
               kArg, "--batch x --seq must be at most 2^31 tokens per step, got --batch ",
               config.batch, " and --seq ", config.seq_len);
  CPATTN_CHECK(config.steps >= 1, kArg, "--steps must be >= 1, got ", config.steps);
  CPATTN_CHECK(config.threads >= 1, kArg, "--threads must be >= 1, got ", config.threads);
  CPATTN_CHECK(config.grad_clip > 0.0 && std::isfinite(config.grad_clip), kArg,
               "gradient clip must be > 0, got ", config.grad_clip);
  CPATTN_CHECK(config.eval_every >= 0, kArg, "--eval-every must be >= 0 (0: off), got ",
               config.eval_every);
  CPATTN_CHECK(config.model.heads >= 1 && config.model.d_model % config.model.heads == 0, kArg,
               "--heads (", config.model.heads, ") must divide --d-model (", config.model.d_model,
               ")");
  validate_config(config.model);
  try {
    check_strategy(config.strategy, config.cp, config.model.heads, config.model.kv_heads);
  } catch (const Error& e) {
    throw Error(e.code(), detail::str_cat("--strategy: ", e.what()));
  }
  try {
    check_strategy_dtype(config.strategy, config.dtype);
  } catch (const Error& e) {
    throw Error(e.code(), detail::str_cat("--dtype ", dtype_name(config.dtype), ": ", e.what()));
  }
  try {
    resolve_params(attention_params(config.dropout), config.model.head_dim(), config.model.heads);
  } catch (const Error& e) {
    throw Error(e.code(), detail::str_cat("--dropout: ", e.what()));
  }
  const auto size = static_cast<int64_t>(text.size());
  CPATTN_CHECK(size >= config.seq_len + 1, kArg, "the text has ", text.size(), " bytes; --seq ",
               config.seq_len, " needs at least ", config.seq_len + 1);
  const TextSplit split = split_text(config, size);
  CPATTN_CHECK(split.train_bytes >= config.seq_len + 1, kArg, "--eval-every holds out the last ",
               split.held_out_bytes, " bytes of the text; the other ", split.train_bytes,
               " bytes are fewer than --seq + 1 = ", config.seq_len + 1);
  config.model.seed = config.seed;
  config.adamw.total_steps = config.steps;
  validate_adamw(config.adamw);
}

std::vector<ConfigField> config_fields(const TrainConfig& c, std::span<const uint8_t> text,
                                       const std::string& text_path) {
  const auto num = [](auto v) { return std::to_string(v); };
  const std::string text_value =
      detail::str_cat(text.size(), " bytes, digest ", digest_hex(Digest().values(text).finish()));
  const TextSplit split = split_text(c, static_cast<int64_t>(text.size()));
  const ModelConfig& m = c.model;
  const AdamWConfig& a = c.adamw;
  std::vector<ConfigField> f = {
      {"--text", text_value, text_path},
      {"held_out_bytes", num(split.held_out_bytes), ""},
      {"--cp", num(c.cp), ""},
      {"--layout", layout_name(c.layout), ""},
      {"--layers", num(m.layers), ""},
      {"--d-model", num(m.d_model), ""},
      {"--heads", num(m.heads), ""},
      {"--kv-heads", num(m.kv_heads), ""},
      {"model.mlp_hidden", num(m.mlp_hidden), ""},
      {"model.vocab", num(m.vocab), ""},
      {"model.rope_base", format_value(m.rope_base), ""},
      {"--seq", num(c.seq_len), ""},
      {"--batch", num(c.batch), ""},
      {"--steps", num(c.steps), ""},
      {"--lr", format_value(a.lr), ""},
      {"--warmup", num(a.warmup_steps), ""},
      {"adamw.beta1", format_value(a.beta1), ""},
      {"adamw.beta2", format_value(a.beta2), ""},
      {"adamw.eps", format_value(a.eps), ""},
      {"adamw.weight_decay", format_value(a.weight_decay), ""},
      {"adamw.min_lr_ratio", format_value(a.min_lr_ratio), ""},
      {"grad_clip", format_value(c.grad_clip), ""},
      {"--dropout", format_value(c.dropout), ""},
      {"--seed", num(c.seed), ""},
      {"--threads", num(c.threads), ""},
      {"--recompute", c.recompute ? "on" : "off", "", false},
      {"--eval-every", num(c.eval_every), "", false},
      {"--on-nonfinite", nonfinite_policy_name(c.on_nonfinite), "", false},
  };
  if (c.dtype != DType::kF32) {
    // After --layout; absent for fp32, as in runs before 16-bit activations existed.
    f.insert(f.begin() + 4, {"--dtype", dtype_name(c.dtype), "", true, dtype_name(DType::kF32)});
  }
  const char* numerics = kernel_numerics_name(kernel_numerics(resolve_isa(Isa::kAuto), c.dtype));
  if (numerics != std::string_view(kernel_numerics_name(KernelNumerics::kFma))) {
    // The attention kernel's arithmetic (CPATTN_ISA, the CPU): a resume on other arithmetic
    // would not continue bitwise. Absent for the fma class, as in runs before it was listed.
    f.push_back(
        {"kernel.numerics", numerics, "", true, kernel_numerics_name(KernelNumerics::kFma)});
  }
  if (c.strategy != Strategy::ring()) {
    // After --layout; absent for the ring, as in runs before strategies existed.
    f.insert(f.begin() + 4,
             {"--strategy", strategy_name(c.strategy), "", true, strategy_name(Strategy::ring())});
  }
  return f;
}

}  // namespace cpattn::train
