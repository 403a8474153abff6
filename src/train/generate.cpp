// Byte sampling from a trained model: one-rank forward over the context, temperature and top-k.
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpattn/error.h"
#include "cpattn/generator.h"
#include "cpattn/thread_communicator.h"
#include "train/model.h"
#include "train/random.h"

namespace cpattn::train {

void validate_sample_options(const SampleOptions& o) {
  constexpr auto kArg = ErrorCode::kInvalidArgument;
  CPATTN_CHECK(o.tokens >= 0, kArg, "--tokens must be >= 0, got ", o.tokens);
  CPATTN_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.0, kArg,
               "--temperature must be finite and >= 0, got ", o.temperature);
  CPATTN_CHECK(o.top_k >= 0, kArg, "--top-k must be >= 0 (0: all), got ", o.top_k);
  CPATTN_CHECK(o.context >= 0, kArg, "--context must be >= 0 (0: all), got ", o.context);
  CPATTN_CHECK(o.threads >= 1, kArg, "--threads must be >= 1, got ", o.threads);
}

std::vector<float> next_byte_logits(Communicator& comm, const ModelParams& params,
                                    std::span<const uint8_t> context, int threads) {
  const ModelConfig& cfg = params.config();
  CPATTN_CHECK(!context.empty(), ErrorCode::kInvalidArgument,
               "next_byte_logits needs at least one byte of context");
  const auto n = static_cast<int64_t>(context.size());
  ShardBatch shard;
  shard.batch = 1;
  shard.local_len = n;
  shard.total_tokens = n;
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t byte = context[static_cast<size_t>(t)];
    CPATTN_CHECK(byte < cfg.vocab, ErrorCode::kInvalidArgument, "byte ", int{byte}, " at position ",
                 t, " is outside the model's vocabulary of ", cfg.vocab);
    shard.inputs.push_back(byte);
    shard.targets.push_back(0);  // unused: only the logits are read
    shard.row_positions.push_back(t);
  }
  StepOptions options;
  options.seq = SequenceSharding::of(Layout::kContiguous, n, 1, 0);
  options.dropout = 0.0f;
  options.cp.num_threads = threads;
  Generator unused(0);  // dropout is off
  const Tensor logits = forward_logits(comm, params, shard, options, unused);
  const float* last = logits.data() + (n - 1) * cfg.vocab;
  return {last, last + cfg.vocab};
}

int64_t sample_index(std::span<const float> logits, double temperature, int64_t top_k, double u) {
  CPATTN_CHECK(!logits.empty(), ErrorCode::kInvalidArgument, "sample_index: no logits");
  const auto v = static_cast<int64_t>(logits.size());
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  if (temperature == 0.0) return order.front();
  const int64_t keep = top_k > 0 ? std::min(top_k, v) : v;
  const double top = logits[static_cast<size_t>(order.front())];
  std::vector<double> p(static_cast<size_t>(keep));
  for (int64_t i = 0; i < keep; ++i) {
    p[static_cast<size_t>(i)] =
        std::exp((logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - top) / temperature);
  }
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  double cumulative = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += p[static_cast<size_t>(i)];
    if (cumulative > u * total) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(keep - 1)];
}

std::vector<uint8_t> generate_bytes(const ModelParams& params, std::span<const uint8_t> prompt,
                                    const SampleOptions& options) {
  validate_sample_options(options);
  CPATTN_CHECK(!prompt.empty(), ErrorCode::kInvalidArgument, "--prompt must not be empty");
  std::vector<uint8_t> text(prompt.begin(), prompt.end());
  SplitMix64 rng(options.seed);
  RunRanksOptions group;
  group.timeout = options.timeout;
  run_ranks(
      1,
      [&](Communicator& comm) {
        for (int64_t i = 0; i < options.tokens; ++i) {
          const auto n = static_cast<int64_t>(text.size());
          const int64_t from = options.context > 0 ? std::max<int64_t>(0, n - options.context) : 0;
          const std::vector<float> logits = next_byte_logits(
              comm, params, std::span<const uint8_t>(text).subspan(static_cast<size_t>(from)),
              options.threads);
          const double u = rng.next_double();
          text.push_back(
              static_cast<uint8_t>(sample_index(logits, options.temperature, options.top_k, u)));
        }
      },
      group);
  return {text.begin() + static_cast<std::ptrdiff_t>(prompt.size()), text.end()};
}

ModelParams checkpoint_params(const Checkpoint& checkpoint) {
  ModelParams params(checkpoint.model);
  CPATTN_CHECK(static_cast<int64_t>(checkpoint.weights.size()) == params.numel(),
               ErrorCode::kShapeMismatch, "checkpoint_params: the checkpoint holds ",
               checkpoint.weights.size(), " weights, its model has ", params.numel());
  std::copy(checkpoint.weights.begin(), checkpoint.weights.end(), params.flat().begin());
  return params;
}

}  // namespace cpattn::train
