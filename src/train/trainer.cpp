// Training job: validation, the step-0 gradient check and the training loop (every rank of the CP
// group holds a full replica of the weights and trains on its shard of every sequence).
#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "cpattn/generator.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#include "train/data.h"
#include "train/model.h"
#include "train/params.h"

namespace cpattn::train {

void validate_train_config(TrainConfig& config, std::span<const uint8_t> text) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(config.cp >= 1, kArg, "--cp must be >= 1, got ", config.cp);
  CPATTN_CHECK(config.seq_len >= config.cp, kArg, "--seq must be >= --cp so every rank holds a ",
               "token, got seq ", config.seq_len, " and cp ", config.cp);
  CPATTN_CHECK(config.batch >= 1, kArg, "--batch must be >= 1, got ", config.batch);
  CPATTN_CHECK(config.steps >= 1, kArg, "--steps must be >= 1, got ", config.steps);
  CPATTN_CHECK(config.threads >= 1, kArg, "--threads must be >= 1, got ", config.threads);
  CPATTN_CHECK(config.grad_clip > 0.0 && std::isfinite(config.grad_clip), kArg,
               "gradient clip must be > 0, got ", config.grad_clip);
  CPATTN_CHECK(config.model.heads >= 1 && config.model.d_model % config.model.heads == 0, kArg,
               "--heads (", config.model.heads, ") must divide --d-model (", config.model.d_model,
               ")");
  validate_config(config.model);
  try {
    resolve_params(attention_params(config.dropout), config.model.head_dim());
  } catch (const Error& e) {
    throw Error(e.code(), detail::str_cat("--dropout: ", e.what()));
  }
  CPATTN_CHECK(static_cast<int64_t>(text.size()) >= config.seq_len + 1, kArg, "the text has ",
               text.size(), " bytes; --seq ", config.seq_len, " needs at least ",
               config.seq_len + 1);
  config.model.seed = config.seed;
  config.adamw.total_steps = config.steps;
  validate_adamw(config.adamw);
}

GroupRunner thread_group(int cp) {
  return [cp](const std::function<void(Communicator&)>& fn) { run_ranks(cp, fn); };
}

namespace {

StepOptions step_options(const TrainConfig& config, int rank, bool recompute) {
  StepOptions o;
  o.seq = SequenceSharding::of(config.layout, config.seq_len, config.cp, rank);
  o.dropout = config.dropout;
  o.recompute = recompute;
  o.ring.num_threads = config.threads;
  return o;
}

void check_group_size(const Communicator& comm, const TrainConfig& config) {
  CPATTN_CHECK(comm.size() == config.cp, ErrorCode::kInvalidArgument, "the CP group has ",
               comm.size(), " ranks but the run is configured for --cp ", config.cp);
}

// Every rank learns every rank's weight digest (a sum of one-hot vectors: exact in double, since
// each 32-bit half is an integer below 2^53) and all throw if any differs from rank 0's.
void check_replicas(Communicator& comm, uint64_t digest) {
  const auto p = static_cast<size_t>(comm.size()), r = static_cast<size_t>(comm.rank());
  std::vector<double> halves(2 * p, 0.0);
  halves[2 * r] = static_cast<double>(digest >> 32);
  halves[2 * r + 1] = static_cast<double>(digest & 0xffffffffu);
  comm.allreduce_sum(std::span<double>(halves));
  const auto of = [&](size_t rank) {
    return (static_cast<uint64_t>(halves[2 * rank]) << 32) |
           static_cast<uint64_t>(halves[2 * rank + 1]);
  };
  std::string differing;
  for (size_t k = 1; k < p; ++k) {
    if (of(k) != of(0)) differing += detail::str_cat(" rank ", k, " ", digest_hex(of(k)), ";");
  }
  CPATTN_CHECK(differing.empty(), ErrorCode::kInternal, "replicas diverged: rank 0 weight digest ",
               digest_hex(of(0)), " but", differing);
}

}  // namespace

StepGradients step_zero(Communicator& comm, const TrainConfig& config,
                        std::span<const uint8_t> text, bool recompute) {
  check_group_size(comm, config);
  const ModelParams params(config.model, &comm.memory());
  ModelGrads grads(config.model, &comm.memory());
  Generator generator(config.seed);
  const BatchSampler sampler(text, config.seq_len, config.batch, config.seed);
  const StepOptions options = step_options(config, comm.rank(), recompute);
  const ShardBatch shard = shard_batch(sampler.sample(0), options.seq);
  StepGradients out;
  out.loss = forward_backward(comm, params, shard, options, generator, grads);
  comm.allreduce_sum(grads.flat());
  out.grads.assign(grads.flat().begin(), grads.flat().end());
  return out;
}

CheckPair compare_gradients(const std::string& name, const ModelConfig& model,
                            const StepGradients& a, const StepGradients& b, double tolerance) {
  CPATTN_CHECK(a.grads.size() == b.grads.size(), ErrorCode::kShapeMismatch,
               "compare_gradients: ", a.grads.size(), " vs ", b.grads.size(), " gradients");
  CheckPair pair;
  pair.name = name;
  pair.loss_rel = std::abs(a.loss - b.loss) / std::max(std::abs(b.loss), 1e-30);
  for (const ParamInfo& info : param_table(model)) {
    double diff = 0.0, ref = 0.0;
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i) {
      const auto k = static_cast<size_t>(i);
      diff = std::max(diff, std::abs(static_cast<double>(a.grads[k]) - b.grads[k]));
      ref = std::max(ref, std::abs(static_cast<double>(b.grads[k])));
    }
    const double rel =
        ref > 0.0 ? diff / ref : (diff > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (rel > pair.grad_rel) {
      pair.grad_rel = rel;
      pair.worst_tensor = info.name;
    }
  }
  pair.passed = pair.loss_rel <= tolerance && pair.grad_rel <= tolerance;
  return pair;
}

CheckReport run_check(const TrainConfig& config, std::span<const uint8_t> text,
                      const GroupRunner& group) {
  CheckReport report;
  report.tolerance = kCheckTolerance;
  std::atomic<bool> failed{false};
  group([&](Communicator& comm) {
    const StepGradients recompute = step_zero(comm, config, text, true);
    const StepGradients full = step_zero(comm, config, text, false);
    double rank_failed = 0.0;
    if (comm.rank() == 0) {
      // The reference: one rank holding the whole sequence, in-process even under MPI.
      TrainConfig solo = config;
      solo.cp = 1;
      StepGradients single;
      run_ranks(1, [&](Communicator& one) { single = step_zero(one, solo, text, false); });
      const std::string p = detail::str_cat("cp=", config.cp);
      report.pairs = {compare_gradients(p + " recompute vs " + p + " no-recompute", config.model,
                                        recompute, full, report.tolerance),
                      compare_gradients(p + " no-recompute vs cp=1", config.model, full, single,
                                        report.tolerance),
                      compare_gradients(p + " recompute vs cp=1", config.model, recompute, single,
                                        report.tolerance)};
      for (const CheckPair& pair : report.pairs) rank_failed += pair.passed ? 0.0 : 1.0;
    }
    // The other ranks wait here while rank 0 computes the cp=1 reference alone, which can take
    // longer than a normal wait's deadline; a failing rank 0 still ends the wait at once
    // (kPeerFailed in-process, MPI_Abort under mpirun).
    const std::chrono::milliseconds deadline = comm.timeout();
    comm.set_timeout(std::max(deadline, std::chrono::milliseconds(std::chrono::hours(24))));
    comm.allreduce_sum(std::span<double>(&rank_failed, 1));
    comm.set_timeout(deadline);
    if (rank_failed > 0.0) failed.store(true);
  });
  report.passed = !failed.load();
  return report;
}

double TrainResult::final_loss() const {
  if (losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t n = std::min(losses.size(), static_cast<size_t>(kFinalWindow));
  return std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(n), losses.end(), 0.0) /
         static_cast<double>(n);
}

TrainResult train(const TrainConfig& config, std::span<const uint8_t> text,
                  const GroupRunner& group,
                  const std::function<void(const StepMetrics&)>& on_step) {
  TrainResult result;
  const int64_t tokens_per_step = config.batch * config.seq_len;
  group([&](Communicator& comm) {
    check_group_size(comm, config);
    const bool lead = comm.rank() == 0;
    ModelParams params(config.model, &comm.memory());
    ModelGrads grads(config.model, &comm.memory());
    AdamW optimizer(config.model, config.adamw, &comm.memory());
    Generator generator(config.seed);
    const BatchSampler sampler(text, config.seq_len, config.batch, config.seed);
    const StepOptions options = step_options(config, comm.rank(), config.recompute);
    std::vector<double> losses;
    comm.barrier();
    const Stopwatch run_watch;
    for (int64_t step = 0; step < config.steps; ++step) {
      const Stopwatch step_watch;
      grads.zero();
      const ShardBatch shard = shard_batch(sampler.sample(step), options.seq);
      const double loss = forward_backward(comm, params, shard, options, generator, grads);
      comm.allreduce_sum(grads.flat());
      clip_grad_norm(grads, config.grad_clip);
      const double lr = optimizer.step(params, grads);
      losses.push_back(loss);
      if (lead && on_step) {
        const double dt = step_watch.seconds();
        on_step({step + 1, loss, lr, static_cast<double>(tokens_per_step) / std::max(dt, 1e-9),
                 run_watch.seconds()});
      }
    }
    const double elapsed = run_watch.seconds();
    const uint64_t digest = params.digest();
    check_replicas(comm, digest);
    if (lead) {
      result.losses = std::move(losses);
      result.elapsed_s = elapsed;
      result.tokens = tokens_per_step * config.steps;
      result.tokens_per_s = static_cast<double>(result.tokens) / std::max(elapsed, 1e-9);
      result.weight_digest = digest;
    }
  });
  return result;
}

}  // namespace cpattn::train
