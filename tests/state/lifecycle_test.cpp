// Lifecycle scenarios a real training stack hits: recompute, several microbatches in flight,
// evaluation without backward, and a long soak. State flows explicitly, so each one is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "state/stack_harness.h"

namespace cpattn::testing {
namespace {

StackConfig causal_dropout_config(int layers) {
  StackConfig config;
  config.layers = layers;
  config.params.causal = true;
  config.params.dropout_p = 0.1f;
  config.recompute_options.strict = true;
  return config;
}

// Every strategy the 4-rank group allows (4 heads: ulysses over 4, hybrid 2 x 2).
const std::vector<Strategy> kStrategies = {Strategy::ring(), Strategy::allgather(),
                                           Strategy::ulysses(), Strategy::hybrid(2, 2)};

std::string strategy_param_name(const Strategy& s) {
  std::string name = strategy_name(s);
  for (char& c : name) c = c == ':' ? '_' : c;
  return name;
}

class RecomputePerStrategy : public ::testing::TestWithParam<Strategy> {};

TEST_P(RecomputePerStrategy, GradientsEqualNoRecomputeBitwiseAndMatchCp1) {
  const StackProblem p(1, 61, 4, 16, 11);
  StackConfig config = causal_dropout_config(4);
  config.cp.strategy = GetParam();
  const std::vector<float> with = stack_input_grad(p, config, 4, /*recompute=*/true);
  const std::vector<float> without = stack_input_grad(p, config, 4, /*recompute=*/false);
  EXPECT_EQ(with, without) << "recompute must replay the very same kernels in the same order";
  StackConfig one = config;
  one.cp.strategy = Strategy::ring();
  const std::vector<float> single = stack_input_grad(p, one, 1, /*recompute=*/false);
  // Different ring sizes sum the softmax in different orders: fp32 rounding only.
  EXPECT_LT(relative_difference(with, single), 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Strategies, RecomputePerStrategy, ::testing::ValuesIn(kStrategies),
                         [](const auto& tp) { return strategy_param_name(tp.param); });

TEST(Lifecycle, RecomputeKeepsAtMostOneForwardResultAlive) {
  const StackProblem p(1, 40, 2, 8, 3);
  const StackConfig config = causal_dropout_config(4);
  run_ranks(2, [&](Communicator& comm) {
    const SequenceSharding seq = p.sharding(2, comm.rank());
    const Tensor x = p.shard(p.x, 2, comm.rank(), &comm.memory());
    Generator generator(5);
    StackActivations acts = stack_forward(comm, config, x.view(), seq, generator, true);
    EXPECT_EQ(memory_stats(comm.memory()).live_forward_results, 0) << "checkpoints hold no tensors";
    comm.memory().reset_peak();
    stack_backward(comm, config, acts, x.view(), seq);
    EXPECT_EQ(memory_stats(comm.memory()).peak_forward_results, 1);
    EXPECT_EQ(memory_stats(comm.memory()).live_forward_results, 0);
  });
}

// Forward microbatches 1, 2, 3, then their backwards in the given order (pipeline schedules do
// this); each gradient must equal that microbatch's isolated forward + backward bitwise.
// For every strategy of a 2-rank group (ulysses over 2 heads, hybrid 1 x 2 and 2 x 1).
class MicrobatchOrder
    : public ::testing::TestWithParam<std::tuple<std::vector<int>, bool, Strategy>> {};

TEST_P(MicrobatchOrder, EveryMicrobatchGetsItsOwnGradients) {
  const std::vector<int>& order = std::get<0>(GetParam());
  const bool recompute = std::get<1>(GetParam());
  const Strategy& strategy = std::get<2>(GetParam());
  constexpr int kCp = 2;
  StackConfig config = causal_dropout_config(3);
  config.cp.strategy = strategy;
  const std::vector<StackProblem> mbs = [] {
    std::vector<StackProblem> v;
    for (uint64_t m = 0; m < 3; ++m) v.emplace_back(1, 23, 2, 8, 100 + 10 * m);
    return v;
  }();
  // Isolated runs: microbatch m draws offsets from m * layers, as in the interleaved run below.
  std::vector<std::vector<float>> isolated;
  for (int m = 0; m < 3; ++m) {
    std::vector<float> dx(static_cast<size_t>(mbs[static_cast<size_t>(m)].x.numel()));
    const StackProblem& p = mbs[static_cast<size_t>(m)];
    run_ranks(kCp, [&](Communicator& comm) {
      const SequenceSharding seq = p.sharding(kCp, comm.rank());
      const Tensor x = p.shard(p.x, kCp, comm.rank(), &comm.memory());
      const Tensor w = p.shard(p.w, kCp, comm.rank(), &comm.memory());
      Generator generator(42, static_cast<uint64_t>(m * config.layers));
      StackActivations acts = stack_forward(comm, config, x.view(), seq, generator, recompute);
      const Tensor g = stack_backward(comm, config, acts, w.view(), seq);
      gather_rows(g.view(), p.token_indices(kCp, comm.rank()), p.S, dx);
    });
    isolated.push_back(std::move(dx));
  }
  std::vector<std::vector<float>> interleaved(3, std::vector<float>(isolated[0].size()));
  run_ranks(kCp, [&](Communicator& comm) {
    Generator generator(42);
    std::vector<StackActivations> acts;
    std::vector<Tensor> ws;
    for (const StackProblem& p : mbs) {
      const SequenceSharding seq = p.sharding(kCp, comm.rank());
      const Tensor x = p.shard(p.x, kCp, comm.rank(), &comm.memory());
      ws.push_back(p.shard(p.w, kCp, comm.rank(), &comm.memory()));
      acts.push_back(stack_forward(comm, config, x.view(), seq, generator, recompute));
    }
    for (int m : order) {
      const StackProblem& p = mbs[static_cast<size_t>(m)];
      const SequenceSharding seq = p.sharding(kCp, comm.rank());
      const Tensor g = stack_backward(comm, config, acts[static_cast<size_t>(m)],
                                      ws[static_cast<size_t>(m)].view(), seq);
      gather_rows(g.view(), p.token_indices(kCp, comm.rank()), p.S,
                  interleaved[static_cast<size_t>(m)]);
    }
  });
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(interleaved[static_cast<size_t>(m)], isolated[static_cast<size_t>(m)])
        << "microbatch " << m;
  }
}

std::string order_name(const ::testing::TestParamInfo<MicrobatchOrder::ParamType>& info) {
  std::string name = "Backward";
  for (int m : std::get<0>(info.param)) name += std::to_string(m + 1);
  return name + (std::get<1>(info.param) ? "_Recompute" : "_Stored") + "_" +
         strategy_param_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Pipelined, MicrobatchOrder,
    ::testing::Combine(::testing::Values(std::vector<int>{2, 1, 0}, std::vector<int>{0, 1, 2},
                                         std::vector<int>{1, 2, 0}),
                       ::testing::Bool(),
                       ::testing::Values(Strategy::ring(), Strategy::allgather(),
                                         Strategy::ulysses(), Strategy::hybrid(1, 2),
                                         Strategy::hybrid(2, 1))),
    order_name);

TEST(Lifecycle, EvaluationForwardsWithoutBackwardLeaveNothingBehind) {
  const StackProblem p(1, 9, 1, 8, 21);
  AttentionParams params;
  params.causal = true;
  params.dropout_p = 0.1f;
  const StateMemoryStats process_before = memory_stats();
  run_ranks(2, [&](Communicator& comm) {
    const SequenceSharding seq = p.sharding(2, comm.rank());
    const Tensor x = p.shard(p.x, 2, comm.rank(), &comm.memory());
    const StateMemoryStats before = memory_stats(comm.memory());
    Generator generator(9);
    for (int i = 0; i < 10'000; ++i) {
      const ForwardResult state =
          attention_forward(comm, x.view(), x.view(), x.view(), seq, params, generator.next());
      ASSERT_EQ(memory_stats(comm.memory()).live_forward_results, 1);
    }
    const StateMemoryStats after = memory_stats(comm.memory());
    EXPECT_EQ(after.live_bytes, before.live_bytes);
    EXPECT_EQ(after.live_forward_results, 0);
  });
  EXPECT_EQ(memory_stats().live_bytes, process_before.live_bytes);
  EXPECT_EQ(memory_stats().live_forward_results, process_before.live_forward_results);
}

// Resident set size of this process in KiB (Linux /proc).
int64_t rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}

// Under a sanitizer the allocator keeps freed memory in quarantine (ASan) or shadow state, so the
// process's RSS says nothing about cpattn's buffers; the counted live bytes, checked after every
// iteration, are the soak's real measure there, on fewer iterations (sanitized code is ~10x
// slower).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kRssIsMeaningful = false;
constexpr int kSoakIterations = 1'000;
#else
constexpr bool kRssIsMeaningful = true;
constexpr int kSoakIterations = 10'000;
#endif

// A leak grows the RSS in proportion to the iterations, so it grows in both halves of the run;
// the allocator taking a few more pages once (another arena when the ranks' threads interleave
// otherwise, as under a loaded machine) grows one half only. The bound is on the smaller half:
// 512 KiB over 4,900 iterations catches a leak of about 107 bytes per iteration, as a bound of
// 1 MiB over the whole run would; the whole run's growth is bounded too (4 MiB).
TEST(Lifecycle, SoakForwardRecomputeBackwardLeaksNothing) {
  const StackProblem p(1, 12, 2, 8, 5);
  const StackConfig config = causal_dropout_config(2);
  constexpr int kIterations = kSoakIterations, kWarmup = 200;
  constexpr int kMiddle = kWarmup + (kIterations - kWarmup) / 2;
  int64_t rss_after_warmup = 0, rss_middle = 0, rss_end = 0;
  run_ranks(2, [&](Communicator& comm) {
    const SequenceSharding seq = p.sharding(2, comm.rank());
    const Tensor x = p.shard(p.x, 2, comm.rank(), &comm.memory());
    const int64_t baseline = comm.memory().stats().live_bytes;
    Generator generator(77);
    for (int i = 0; i < kIterations; ++i) {
      StackActivations acts = stack_forward(comm, config, x.view(), seq, generator, true);
      const Tensor g = stack_backward(comm, config, acts, x.view(), seq);
      ASSERT_EQ(comm.memory().stats().live_bytes,
                baseline + static_cast<int64_t>(acts.output.numel() + g.numel()) * 4)
          << "iteration " << i;
      if (i == kWarmup || i == kMiddle) {
        comm.barrier();
        if (comm.rank() == 0) (i == kWarmup ? rss_after_warmup : rss_middle) = rss_kib();
      }
    }
    comm.barrier();
    if (comm.rank() == 0) rss_end = rss_kib();
    EXPECT_EQ(memory_stats(comm.memory()).live_forward_results, 0);
  });
  ASSERT_GT(rss_after_warmup, 0);
  if (kRssIsMeaningful) {
    const int64_t first = rss_middle - rss_after_warmup, second = rss_end - rss_middle;
    EXPECT_LT(std::min(first, second), 512)
        << "RSS grew by " << first << " KiB over iterations " << kWarmup << ".." << kMiddle
        << " and by " << second << " KiB over " << kMiddle << ".." << kIterations;
    // A half that shrank (the allocator gave pages back) must not hide a growth in the other.
    EXPECT_LT(first + second, 4096) << "RSS grew by " << first + second << " KiB in all";
  }
}

}  // namespace
}  // namespace cpattn::testing
