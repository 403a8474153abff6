// The training loop: resume, steps with the non-finite guard, held-out evaluation, stop requests
// agreed at step boundaries, and checkpoints.
#include <array>
#include <cmath>
#include <mutex>
#include <optional>

#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "cpattn/generator.h"
#include "cpattn/stopwatch.h"
#include "train/data.h"
#include "train/model.h"
#include "train/model_params.h"
#include "train/step_detail.h"
#include "train/trainer.h"

namespace cpattn::train {

namespace {

// Every rank's request, summed per kind (exact small integers); the largest requested kind wins,
// so every rank returns the same one.
StopRequest agree_on_stop(Communicator& comm, StopRequest mine) {
  std::array<double, 4> votes{};
  votes[static_cast<size_t>(mine)] = 1.0;
  comm.allreduce_sum(std::span<double>(votes));
  for (size_t kind = votes.size(); kind-- > 1;) {
    if (votes[kind] > 0.0) return static_cast<StopRequest>(kind);
  }
  return StopRequest::kNone;
}

// Why a step's update must not be applied ("" when the loss and the gradient norm are finite).
// Both are equal on every rank (the loss and the gradients are all-reduced), so every rank
// decides alike.
std::string nonfinite_reason(double loss, const ModelGrads& grads, int64_t step) {
  if (!std::isfinite(loss)) {
    return cpattn::detail::str_cat("non-finite loss ", loss, " at step ", step);
  }
  const double norm = grad_norm(grads);
  if (std::isfinite(norm)) return {};
  const ParamInfo* bad = grads.first_nonfinite();
  return cpattn::detail::str_cat("non-finite gradient norm ", norm, " at step ", step,
                                 " (first non-finite value in ", bad ? bad->name : "?", ")");
}

// The mutable state of one rank's run: what a checkpoint records.
struct RunState {
  int64_t step = 0;
  int64_t data_position = 0;
  int64_t skipped = 0;
  std::vector<double> losses;
  std::vector<EvalPoint> evals;
};

}  // namespace

TrainResult train(const TrainConfig& config, std::span<const uint8_t> text,
                  const GroupRunner& group, const TrainHooks& hooks, const Checkpoint* resume) {
  const std::vector<ConfigField> fields = config_fields(config, text, "");
  if (resume != nullptr) check_resumable(*resume, fields, "resume checkpoint");
  const std::string config_text = training_config_text(fields);
  const TextSplit split = split_text(config, static_cast<int64_t>(text.size()));
  const std::span<const uint8_t> train_text = training_part(config, text);
  const int64_t tokens_per_step = config.batch * config.seq_len;
  TrainResult result;
  std::mutex result_mu;
  bool have_result = false;
  group([&](Communicator& comm) {
    check_group_size(comm, config);
    const bool lead = comm.rank() == 0;
    ModelParams params(config.model, &comm.memory());
    ModelGrads grads(config.model, &comm.memory());
    AdamW optimizer(config.model, config.adamw, &comm.memory());
    Generator generator(config.seed);
    const BatchSampler sampler(train_text, config.seq_len, config.batch, config.seed);
    // The ring's buffers, kept across layers and steps (AttentionWorkspace): only the first step
    // faults fresh memory in.
    AttentionWorkspace ring_workspace(&comm.memory());
    StepOptions options = step_options(config, comm.rank(), config.recompute);
    options.cp.workspace = &ring_workspace;
    StepOptions eval_options = options;
    eval_options.dropout = 0.0f;
    // Only the training step stops inside itself: an evaluation runs after the update.
    options.cp.stop_requested = hooks.stop_requested;
    std::optional<ShardBatch> eval_shard;
    if (config.eval_every > 0) {
      const Batch held_out = evenly_spaced_batch(
          text.subspan(static_cast<size_t>(split.train_bytes)), config.seq_len, config.batch);
      eval_shard = shard_batch(held_out, options.seq);
    }
    RunState st;
    if (resume != nullptr) {
      CPATTN_CHECK(static_cast<int64_t>(resume->weights.size()) == params.numel(),
                   ErrorCode::kShapeMismatch, "resume: the checkpoint holds ",
                   resume->weights.size(), " weights, the model has ", params.numel());
      std::copy(resume->weights.begin(), resume->weights.end(), params.flat().begin());
      optimizer.restore(resume->adam_steps, resume->adam_m, resume->adam_v);
      generator.set_state(resume->generator);
      st = {resume->step, resume->data_position, resume->skipped_steps, resume->losses,
            resume->evals};
    }
    const int64_t first_step = st.step;
    int64_t saved_step = -1;
    const auto checkpoint_now = [&] {
      Checkpoint c;
      c.model = config.model;
      c.seq_len = config.seq_len;
      c.config_text = config_text;
      c.step = st.step;
      c.data_position = st.data_position;
      c.generator = generator.state();
      c.skipped_steps = st.skipped;
      c.losses = st.losses;
      c.evals = st.evals;
      c.adam_steps = optimizer.steps_taken();
      c.weights.assign(params.flat().begin(), params.flat().end());
      c.adam_m.assign(optimizer.first_moment().begin(), optimizer.first_moment().end());
      c.adam_v.assign(optimizer.second_moment().begin(), optimizer.second_moment().end());
      return c;
    };
    const auto save = [&] {
      check_replicas(comm, params.digest());
      rank0_result(comm, [&] {
        hooks.save(checkpoint_now());
        return std::vector<std::byte>();
      });
      saved_step = st.step;
    };

    RunEnd end = RunEnd::kCompleted;
    StopRequest stop = StopRequest::kNone;
    std::string nonfinite;
    bool stopped_inside_step = false;
    comm.barrier();
    const Stopwatch run_watch;
    while (st.step < config.steps) {
      if (hooks.poll_stop) {
        stop = agree_on_stop(comm, hooks.poll_stop());
        if (stop != StopRequest::kNone) {
          end = RunEnd::kStopped;
          break;
        }
      }
      const Stopwatch step_watch;
      const RngState step_rng = generator.state();
      grads.zero();
      const ShardBatch shard = shard_batch(sampler.sample(st.data_position), options.seq);
      double loss = 0.0;
      try {
        loss = forward_backward(comm, params, shard, options, generator, grads);
        comm.allreduce_sum(grads.flat());
      } catch (const Error&) {
        // Stopped inside the step (kInterrupted here, kPeerFailed from a rank that stopped
        // first): every rank abandons this step, and the state of the last boundary stands.
        if (hooks.stop_requested == nullptr || !hooks.stop_requested->load()) throw;
        generator.set_state(step_rng);
        end = RunEnd::kStopped;
        stop = hooks.poll_stop();
        stopped_inside_step = true;
        break;
      }
      std::string bad = nonfinite_reason(loss, grads, st.step + 1);
      if (bad.empty()) {
        clip_grad_norm(grads, config.grad_clip);
        bad = optimizer.nonfinite_update(params, grads);
        if (!bad.empty()) bad += cpattn::detail::str_cat(" at step ", st.step + 1);
      }
      if (!bad.empty() && config.on_nonfinite == NonFinitePolicy::kStop) {
        generator.set_state(step_rng);  // the state stays that of the last good boundary
        end = RunEnd::kNonFinite;
        nonfinite = bad;
        break;
      }
      double lr = 0.0;
      if (bad.empty()) {
        lr = optimizer.step(params, grads);
      } else {
        ++st.skipped;
      }
      st.losses.push_back(loss);
      ++st.step;
      ++st.data_position;
      std::optional<double> eval;
      if (eval_shard && (st.step % config.eval_every == 0 || st.step == config.steps)) {
        Generator unused(0);  // dropout is off: evaluation draws no randomness that matters
        eval = forward_loss(comm, params, *eval_shard, eval_options, unused);
        st.evals.push_back({st.step, *eval});
      }
      if (lead && hooks.on_step) {
        const double dt = step_watch.seconds();
        hooks.on_step({st.step, loss, lr, static_cast<double>(tokens_per_step) / std::max(dt, 1e-9),
                       run_watch.seconds(), !bad.empty(), eval});
      }
      if (hooks.save && hooks.save_every > 0 && st.step % hooks.save_every == 0 &&
          st.step < config.steps) {
        save();
      }
    }
    const double elapsed = run_watch.seconds();
    const uint64_t digest = params.digest();
    if (stopped_inside_step) {
      // The group cannot agree any more (a rank may have left): rank 0 saves alone; the replicas
      // were equal at the last boundary and no update followed.
      if (lead && hooks.save) {
        hooks.save(checkpoint_now());
        saved_step = st.step;
      }
    } else {
      if (hooks.save) save();
      check_replicas(comm, digest);
    }
    // Rank 0's view; in a process without rank 0 (MPI), its own rank's (equal but the timings).
    const std::lock_guard<std::mutex> lock(result_mu);
    if (lead || !have_result) {
      have_result = true;
      result.losses = std::move(st.losses);
      result.evals = std::move(st.evals);
      result.first_step = first_step;
      result.steps_done = st.step;
      result.skipped_steps = st.skipped;
      result.end = end;
      result.stop = stop;
      result.nonfinite = nonfinite;
      result.saved_step = saved_step;
      result.elapsed_s = elapsed;
      result.tokens = tokens_per_step * (st.step - first_step);
      result.tokens_per_s = static_cast<double>(result.tokens) / std::max(elapsed, 1e-9);
      result.weight_digest = digest;
    }
  });
  return result;
}

}  // namespace cpattn::train
