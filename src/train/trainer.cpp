// Training job: the in-process group, the step-0 gradient check and the final-loss summary (the
// loop itself is train_loop.cpp).
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
#include "train/model_params.h"
#include "train/step_detail.h"

namespace cpattn::train {

GroupRunner thread_group(int cp, std::chrono::milliseconds timeout) {
  return [cp, timeout](const std::function<void(Communicator&)>& fn) {
    RunRanksOptions options;
    options.timeout = timeout;
    run_ranks(cp, fn, options);
  };
}

StepGradients step_zero(Communicator& comm, const TrainConfig& config,
                        std::span<const uint8_t> text, bool recompute) {
  check_group_size(comm, config);
  const ModelParams params(config.model, &comm.memory());
  ModelGrads grads(config.model, &comm.memory());
  Generator generator(config.seed);
  const BatchSampler sampler(training_part(config, text), config.seq_len, config.batch,
                             config.seed);
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

double check_tolerance(DType dtype) {
  return dtype == DType::kF32 ? kCheckTolerance : unit_roundoff(dtype);
}

CheckReport run_check(const TrainConfig& config, std::span<const uint8_t> text,
                      const GroupRunner& group) {
  CheckReport report;
  report.tolerance = check_tolerance(config.dtype);
  // The reference first: one rank holding the whole sequence, computed by this process alone.
  TrainConfig solo = config;
  solo.cp = 1;
  solo.strategy = Strategy::ring();  // the single-rank reference: one kernel call per layer
  StepGradients single;
  run_ranks(1, [&](Communicator& one) { single = step_zero(one, solo, text, false); });
  std::atomic<bool> failed{false};
  group([&](Communicator& comm) {
    const StepGradients recompute = step_zero(comm, config, text, true);
    const StepGradients full = step_zero(comm, config, text, false);
    const std::string p = detail::str_cat("cp=", config.cp);
    std::vector<CheckPair> pairs = {
        compare_gradients(p + " recompute vs " + p + " no-recompute", config.model, recompute, full,
                          report.tolerance),
        compare_gradients(p + " no-recompute vs cp=1", config.model, full, single,
                          report.tolerance),
        compare_gradients(p + " recompute vs cp=1", config.model, recompute, single,
                          report.tolerance)};
    for (const CheckPair& pair : pairs) {
      if (!pair.passed) failed.store(true);
    }
    if (comm.rank() == 0) report.pairs = std::move(pairs);
  });
  report.passed = !failed.load();
  return report;
}

namespace {
// Indices of the last min(kFinalWindow, n) finite losses.
std::vector<size_t> final_indices(const std::vector<double>& losses) {
  std::vector<size_t> at;
  for (size_t i = losses.size(); i-- > 0 && at.size() < TrainResult::kFinalWindow;) {
    if (std::isfinite(losses[i])) at.push_back(i);
  }
  return at;
}
}  // namespace

double TrainResult::final_loss() const {
  const std::vector<size_t> at = final_indices(losses);
  if (at.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0.0;
  for (auto i = at.rbegin(); i != at.rend(); ++i) sum += losses[*i];  // in step order
  return sum / static_cast<double>(at.size());
}

int64_t TrainResult::final_window() const {
  return static_cast<int64_t>(final_indices(losses).size());
}

}  // namespace cpattn::train
