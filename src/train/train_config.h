// TrainConfig: everything that defines a training run, its validation, the held-out split of the
// text, and the run's settings as a list of named fields (the one list compared across ranks at
// start-up and against a checkpoint on resume).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cpattn/dtype.h"
#include "cpattn/layout.h"
#include "cpattn/strategy.h"
#include "train/adamw.h"
#include "train/agreement.h"
#include "train/model_config.h"

namespace cpattn::train {

/// What a step with a non-finite loss or gradient norm does (--on-nonfinite).
enum class NonFinitePolicy {
  kStop,  ///< stop training at that step with an error naming it (default)
  kSkip,  ///< drop that step's update (counted as skipped) and go on
};

/// "stop" / "skip".
const char* nonfinite_policy_name(NonFinitePolicy policy);

/// Everything that defines a run. Equal on every rank.
struct TrainConfig {
  ModelConfig model;  ///< model.seed is set from `seed` by validate_train_config
  int cp = 4;         ///< ranks of the CP group (P)
  Layout layout = Layout::kZigzag;
  Strategy strategy{};  ///< how the CP group splits attention (--strategy; default ring)
  /// Attention activations' dtype (--dtype; StepOptions::activations): fp32, or bf16 / fp16
  /// with fp32 master weights and optimizer (the ring strategy only).
  DType dtype = DType::kF32;
  int64_t seq_len = 256;   ///< S, tokens per sequence (split over the P ranks)
  int64_t batch = 8;       ///< B, sequences per step
  int64_t steps = 100;     ///< optimizer updates
  AdamWConfig adamw;       ///< total_steps is set from `steps` by validate_train_config
  double grad_clip = 1.0;  ///< global gradient-norm clip (after the all-reduce)
  float dropout = 0.1f;    ///< attention dropout probability
  bool recompute = true;   ///< checkpoint every layer
  uint64_t seed = 0;       ///< parameter init, batch sampling and dropout
  int threads = 1;         ///< kernel threads per rank
  /// Held-out loss every N updates (and after the last); 0 = off. When > 0 the text's tail is
  /// held out (split_text) and never sampled for training.
  int64_t eval_every = 0;
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;
};

/// Where training data ends and the held-out tail begins.
struct TextSplit {
  int64_t train_bytes = 0;     ///< text[0, train_bytes) is sampled for training
  int64_t held_out_bytes = 0;  ///< the last held_out_bytes bytes are used only for evaluation
};

/// The most tokens a step may hold (--batch x --seq): 2^31, far above what fits a machine's
/// memory at any model size, so that no size computed from them can overflow.
inline constexpr int64_t kMaxStepTokens = int64_t{1} << 31;

/// Held-out share of the text with --eval-every: 1 / kHeldOutDivisor (the last 10 %).
inline constexpr int64_t kHeldOutDivisor = 10;

/// eval_every == 0: the whole text trains ({size, 0}). Otherwise the last
/// max(seq_len + 1, size / kHeldOutDivisor) bytes are held out. Does not validate.
TextSplit split_text(const TrainConfig& config, int64_t text_size);

/// Checks every field that can be checked before any rank starts, so a bad command line fails
/// with one message: cp >= 1, seq_len >= cp (every rank holds a token), batch >= 1, batch x
/// seq_len <= kMaxStepTokens, steps >= 1,
/// dropout in [0, 1), threads >= 1, grad_clip > 0, eval_every >= 0, text.size() >= seq_len + 1
/// and, with eval_every > 0, both parts of split_text >= seq_len + 1; the strategy can run the
/// model's heads on cp ranks (check_strategy) in the dtype (check_strategy_dtype); plus
/// validate_config
/// (heads dividing d_model, ...) and validate_adamw. Fills model.seed and adamw.total_steps.
/// Throws Error(kInvalidArgument) naming the value.
void validate_train_config(TrainConfig& config, std::span<const uint8_t> text);

/// The settings of a validated run, one field each, by command-line flag where there is one:
/// "--text" (value: "<size> bytes, digest <hex>", note: text_path), "held_out_bytes", "--cp",
/// "--layout", "--strategy" (only when not ring, so that ring runs keep the fields of earlier
/// versions and resume their checkpoints), "--layers", "--d-model", "--heads", "--kv-heads",
/// "model.mlp_hidden", "model.vocab", "model.rope_base", "--seq", "--batch", "--steps", "--lr",
/// "--warmup", "adamw.beta1", "adamw.beta2", "adamw.eps", "adamw.weight_decay",
/// "adamw.min_lr_ratio", "grad_clip", "--dropout", "--seed", "--threads" (training fields: they
/// shape the weights), then "--recompute" (bitwise the same weights either way), "--eval-every" and
/// "--on-nonfinite" (training = false), then "kernel.numerics" (a training field: the attention
/// kernel's arithmetic for config.dtype on the path CPATTN_ISA or this CPU resolves to, listed
/// only when not "fma", so that fma runs resume the checkpoints of earlier versions).
std::vector<ConfigField> config_fields(const TrainConfig& config, std::span<const uint8_t> text,
                                       const std::string& text_path);

}  // namespace cpattn::train
