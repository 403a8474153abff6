// The training job behind `cpattn train`: configuration and its validation, the step-0 gradient
// check (cp=P with and without recompute vs cp=1), and the training loop over a CP group.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/layout.h"
#include "train/adamw.h"
#include "train/config.h"

namespace cpattn::train {

/// Everything that defines a run. Equal on every rank.
struct TrainConfig {
  ModelConfig model;  ///< model.seed is set from `seed` by validate_train_config
  int cp = 4;         ///< ranks of the CP group (P)
  Layout layout = Layout::kZigzag;
  int64_t seq_len = 256;   ///< S, tokens per sequence (split over the P ranks)
  int64_t batch = 8;       ///< B, sequences per step
  int64_t steps = 100;     ///< optimizer updates
  AdamWConfig adamw;       ///< total_steps is set from `steps` by validate_train_config
  double grad_clip = 1.0;  ///< global gradient-norm clip (after the all-reduce)
  float dropout = 0.1f;    ///< attention dropout probability
  bool recompute = true;   ///< checkpoint every layer
  uint64_t seed = 0;       ///< parameter init, batch sampling and dropout
  int threads = 1;         ///< kernel threads per rank
};

/// Checks every field that can be checked before any rank starts, so a bad command line fails
/// with one message: cp >= 1, seq_len >= cp (every rank holds a token), batch >= 1, steps >= 1,
/// dropout in [0, 1), threads >= 1, grad_clip > 0, text.size() >= seq_len + 1, plus
/// validate_config (heads dividing d_model, ...) and validate_adamw. Fills model.seed and
/// adamw.total_steps. Throws Error(kInvalidArgument) naming the value.
void validate_train_config(TrainConfig& config, std::span<const uint8_t> text);

/// Runs fn(comm) on every rank of a CP group of config.cp ranks (in-process threads, or this
/// process's MPI rank) and returns when this process's ranks are done.
using GroupRunner = std::function<void(const std::function<void(Communicator&)>& fn)>;

/// The in-process group: run_ranks(cp, fn).
GroupRunner thread_group(int cp);

/// Loss and all-reduced gradients of update 0 (before any optimizer step).
struct StepGradients {
  double loss = 0.0;
  std::vector<float> grads;  ///< flat, ModelGrads order
};

/// Computes loss and gradients of step 0 on rank comm.rank() of a group of config.cp ranks,
/// with or without recompute (the gradients are all-reduced: equal on every rank).
StepGradients step_zero(Communicator& comm, const TrainConfig& config,
                        std::span<const uint8_t> text, bool recompute);

/// One compared pair of the check: the largest relative difference over the loss and over every
/// parameter tensor (max |a - b| / max |b| within the tensor).
struct CheckPair {
  std::string name;          ///< e.g. "cp=4 recompute vs cp=1"
  double loss_rel = 0.0;     ///< |loss_a - loss_b| / |loss_b|
  double grad_rel = 0.0;     ///< max over tensors
  std::string worst_tensor;  ///< the tensor that gives grad_rel; empty when all are equal
  bool passed = false;       ///< max(loss_rel, grad_rel) <= tolerance
};

struct CheckReport {
  double tolerance = 0.0;
  std::vector<CheckPair>
      pairs;  ///< recompute vs no-recompute, no-recompute vs cp=1, recompute vs cp=1
  bool passed = false;
};

/// The bound of --check: float32 ops summed in a different order (sharded GEMM reductions, LSE
/// merges, all-reduce) differ by a few ulps, far below it. See docs/train.md.
inline constexpr double kCheckTolerance = 1e-5;

/// Compares two step-0 results tensor by tensor (see CheckPair).
CheckPair compare_gradients(const std::string& name, const ModelConfig& model,
                            const StepGradients& a, const StepGradients& b, double tolerance);

/// --check: step 0 three ways with the same seed: cp=P with recompute, cp=P without, and cp=1
/// without (run in-process by the group's rank 0 with run_ranks(1, ...)). Runs inside `group`.
/// report.pairs is filled in the process that holds rank 0 (empty in other MPI processes);
/// report.passed is the same in every process.
CheckReport run_check(const TrainConfig& config, std::span<const uint8_t> text,
                      const GroupRunner& group);

/// What rank 0 reports after every update.
struct StepMetrics {
  int64_t step = 0;           ///< 1-based update count
  double loss = 0.0;          ///< global mean loss of the update's batch (before the update)
  double lr = 0.0;            ///< learning rate the update used
  double tokens_per_s = 0.0;  ///< global tokens (B * S) per second of this update
  double elapsed_s = 0.0;     ///< since the loop started
};

/// Outcome of a run, as seen by rank 0 of the group.
struct TrainResult {
  std::vector<double> losses;  ///< per update
  double elapsed_s = 0.0;      ///< training loop wall time
  double tokens_per_s = 0.0;   ///< steps * B * S / elapsed_s
  uint64_t weight_digest = 0;  ///< digest of the final weights (equal on every rank)
  int64_t tokens = 0;          ///< steps * B * S
  /// Mean of the last min(kFinalWindow, steps) losses: the per-batch loss is noisy (dropout,
  /// random windows), so the final loss averages a few.
  double final_loss() const;
  static constexpr int64_t kFinalWindow = 10;
};

/// Trains config.steps updates: each rank samples the same batch (BatchSampler, pure function of
/// (seed, step)), takes its shard, runs forward_backward, all-reduces the gradients (sum, fixed
/// rank order), clips their global norm and applies AdamW, so replicas stay bitwise identical.
/// At the end every rank compares the weight digests of all ranks and throws
/// Error(kInternal) "replicas diverged: ..." naming the ranks if any differ. on_step is called by
/// rank 0 after each update. Throws what validate_train_config and the step throw.
TrainResult train(const TrainConfig& config, std::span<const uint8_t> text,
                  const GroupRunner& group, const std::function<void(const StepMetrics&)>& on_step);

}  // namespace cpattn::train
