// The training job behind `cpattn train`: the step-0 gradient check (cp=P with and without
// recompute vs cp=1) and the training loop over a CP group, with held-out evaluation, a
// non-finite guard, stop requests at step boundaries and checkpoints (save and resume).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/layout.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/model_config.h"
#include "train/train_config.h"

namespace cpattn::train {

/// Runs fn(comm) on every rank of a CP group of config.cp ranks (in-process threads, or this
/// process's MPI rank) and returns when this process's ranks are done.
using GroupRunner = std::function<void(const std::function<void(Communicator&)>& fn)>;

/// The in-process group: run_ranks(cp, fn) with every wait bounded by `timeout` (the one
/// deadline of a run: --timeout).
GroupRunner thread_group(int cp, std::chrono::milliseconds timeout = kDefaultCommTimeout);

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

/// The bound of --check for a run with attention activations of `dtype`: kCheckTolerance for
/// fp32; for bf16 / fp16 the dtype's unit roundoff (2^-8, 2^-11). The fp32 differences above
/// then move some values of q, k, v, dout, dq, dk, dv across a rounding boundary of the 16-bit
/// grid, a change of one 16-bit ulp there; measured 4.8e-4 for bf16 (docs/train.md).
double check_tolerance(DType dtype);

/// Compares two step-0 results tensor by tensor (see CheckPair).
CheckPair compare_gradients(const std::string& name, const ModelConfig& model,
                            const StepGradients& a, const StepGradients& b, double tolerance);

/// --check: step 0 three ways with the same seed: cp=P with recompute, cp=P without, and cp=1
/// without. The cp=1 reference runs first, once per process, on a group of one in-process rank
/// (no rank ever waits for another while it runs: under MPI every process computes its own, so
/// the group's waits keep their normal deadline); then the two cp=P runs run inside `group`.
/// report.pairs is filled in the process that holds rank 0 (empty in other MPI processes);
/// report.passed is the same in every process (every rank compares the same all-reduced
/// gradients with the same reference).
CheckReport run_check(const TrainConfig& config, std::span<const uint8_t> text,
                      const GroupRunner& group);

/// What rank 0 reports after every update.
struct StepMetrics {
  int64_t step = 0;                 ///< 1-based update count
  double loss = 0.0;                ///< global mean loss of the update's batch (before the update)
  double lr = 0.0;                  ///< learning rate the update used (0 when skipped)
  double tokens_per_s = 0.0;        ///< global tokens (B * S) per second of this update
  double elapsed_s = 0.0;           ///< since this invocation's loop started
  bool skipped = false;             ///< non-finite loss or gradients: the update was dropped
  std::optional<double> eval_loss;  ///< held-out loss after this update, when evaluated
};

/// A request to stop at the next step boundary, raised by any rank (signal handlers, an output
/// that failed on rank 0, a test). Larger values win when ranks ask for different ones.
enum class StopRequest : int {
  kNone = 0,
  kInterrupt = 1,     ///< SIGINT
  kTerminate = 2,     ///< SIGTERM
  kOutputFailed = 3,  ///< rank 0 could not write its progress or metrics
};

/// How a run ended.
enum class RunEnd {
  kCompleted,  ///< every update done
  kStopped,    ///< a StopRequest at a step boundary
  kNonFinite,  ///< a non-finite loss or gradient norm under NonFinitePolicy::kStop
};

/// The training loop's callbacks and checkpoint policy.
struct TrainHooks {
  /// Rank 0, after each update (and its evaluation, if any).
  std::function<void(const StepMetrics&)> on_step;
  /// Every rank, at the step boundary before each update: one allreduce of the requests makes
  /// every rank stop at the same boundary. Set on every rank or on none.
  std::function<StopRequest()> poll_stop;
  /// Every rank, or none: a flag (set by a signal handler) that stops the step in progress at its
  /// next interruption point (attention's work items, each layer) instead of at the boundary.
  /// The step is abandoned by every rank and the run ends as poll_stop's request at the last
  /// boundary, whose state is untouched (the update comes after the step's last interruption
  /// point), saved by `save` from rank 0 without a further message. Only for groups whose ranks
  /// all read this one flag (in-process ranks): a rank of another process would wait for the
  /// abandoned step's messages. null: stops only at boundaries. Needs poll_stop.
  const std::atomic<bool>* stop_requested = nullptr;
  /// Rank 0, with the state to save (after the replicas' digests were found equal): every
  /// save_every updates, when stopped, and at the end. An Error it throws fails every rank alike
  /// (GroupError). Empty: nothing is saved.
  std::function<void(const Checkpoint&)> save;
  int64_t save_every = 0;  ///< 0: only when stopped and at the end
};

/// Outcome of a run, as seen by rank 0 of the group, or, in an MPI process without rank 0, by its
/// own rank (every field but the timings is equal on every rank). A resumed run includes the
/// history it resumed from: losses, evals and skipped steps.
struct TrainResult {
  std::vector<double> losses;  ///< per update, from update 1 (NaN or inf for skipped ones)
  std::vector<EvalPoint> evals;
  int64_t first_step = 0;     ///< updates done before this invocation (the resumed step)
  int64_t steps_done = 0;     ///< updates done at the end
  int64_t skipped_steps = 0;  ///< updates dropped by NonFinitePolicy::kSkip
  RunEnd end = RunEnd::kCompleted;
  StopRequest stop = StopRequest::kNone;  ///< why, when end == kStopped
  std::string nonfinite;       ///< when end == kNonFinite: "non-finite loss nan at step 3 ..."
  int64_t saved_step = -1;     ///< step of the last checkpoint written (-1: none)
  double elapsed_s = 0.0;      ///< this invocation's training loop wall time
  double tokens_per_s = 0.0;   ///< tokens / elapsed_s
  uint64_t weight_digest = 0;  ///< digest of the final weights (equal on every rank)
  int64_t tokens = 0;          ///< (steps_done - first_step) * B * S
  /// Mean of the last min(kFinalWindow, n) finite losses (n: finite losses so far; NaN when none):
  /// the per-batch loss is noisy (dropout, random windows), so the final loss averages a few.
  double final_loss() const;
  /// Number of losses final_loss() averages.
  int64_t final_window() const;
  static constexpr int64_t kFinalWindow = 10;
};

/// Trains from update resume->step (or 0) to config.steps. Each rank samples the same batch
/// (BatchSampler over the training part of split_text, a pure function of (seed, step)), takes
/// its shard, runs forward_backward, all-reduces the gradients (sum, fixed rank order), checks
/// that the loss and the gradient norm are finite, clips the norm and applies AdamW, so replicas
/// stay bitwise identical.
/// - Non-finite loss or gradient norm (decided alike on every rank: both are all-reduced):
///   kStop ends the run (RunEnd::kNonFinite, `nonfinite` names the step, the value and, for
///   gradients, the first tensor holding one) before the update; kSkip drops the update.
/// - With config.eval_every > 0, after every eval_every-th update and the last, the loss of a
///   fixed batch from the held-out tail (evenly_spaced_batch, dropout off) is evaluated.
/// - hooks.poll_stop is polled at step boundaries; a request ends the run there (kStopped).
/// - Checkpoints (hooks.save): see TrainHooks. They record the state at a step boundary, so a
///   run resumed from one (resume) gives bitwise the losses and weights of an uninterrupted run.
/// - Before each save and at the end every rank compares the weight digests of all ranks and
///   throws Error(kInternal) "replicas diverged: ..." naming the ranks if any differ.
/// Throws GroupError from check_resumable (resume written under other settings) and from a
/// failing hooks.save; what validate_train_config and the step throw.
TrainResult train(const TrainConfig& config, std::span<const uint8_t> text,
                  const GroupRunner& group, const TrainHooks& hooks = {},
                  const Checkpoint* resume = nullptr);

}  // namespace cpattn::train
