// Cost of recompute (activation checkpointing) over an L = 8 residual attention stack on 2
// in-process ranks: (time with recompute) / (time without) should be at most
// 1 + forward/total + 0.05, i.e. one extra forward per layer and nothing else.
#include <benchmark/benchmark.h>

#include <chrono>

#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#include "support/attention_stack.h"

namespace cpattn::testing {
namespace {

struct Timings {
  double forward_s = 0, plain_s = 0, recompute_s = 0;
};

// One training step of the stack on each rank, timed on rank 0 between barriers.
Timings time_step(int64_t seq_len, int layers) {
  constexpr int kCp = 2;
  Tensor x({1, seq_len, 4, 64});
  fill_uniform(x, 1);
  StackConfig config;
  config.layers = layers;
  config.params.causal = true;
  config.params.dropout_p = 0.1f;
  config.recompute_options.strict = false;
  Timings t;
  run_ranks(kCp, [&](Communicator& comm) {
    SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, seq_len, kCp, comm.rank());
    const Tensor xr = shard_tensor(x.view(), seq, comm.rank(), &comm.memory());
    const auto seconds = [&](auto&& fn) {
      comm.barrier();
      const Stopwatch start;
      fn();
      comm.barrier();
      return start.seconds();
    };
    Generator gen(3);
    const double fwd = seconds([&] { stack_forward(comm, config, xr.view(), seq, gen, false); });
    const double plain = seconds([&] {
      StackActivations a = stack_forward(comm, config, xr.view(), seq, gen, false);
      stack_backward(comm, config, a, xr.view(), seq);
    });
    const double rec = seconds([&] {
      StackActivations a = stack_forward(comm, config, xr.view(), seq, gen, true);
      stack_backward(comm, config, a, xr.view(), seq);
    });
    if (comm.rank() == 0) t = {fwd, plain, rec};
  });
  return t;
}

void BM_RecomputeOverhead(benchmark::State& state) {
  Timings sum;
  for (auto _ : state) {
    const Timings t = time_step(state.range(0), 8);
    sum.forward_s += t.forward_s;
    sum.plain_s += t.plain_s;
    sum.recompute_s += t.recompute_s;
  }
  const double ratio = sum.recompute_s / sum.plain_s;
  const double bound = 1.0 + sum.forward_s / sum.plain_s + 0.05;
  state.counters["forward_over_total"] = sum.forward_s / sum.plain_s;
  state.counters["recompute_over_plain"] = ratio;
  state.counters["bound"] = bound;
  state.counters["meets_bound"] = ratio <= bound ? 1 : 0;
}
BENCHMARK(BM_RecomputeOverhead)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace cpattn::testing

BENCHMARK_MAIN();
