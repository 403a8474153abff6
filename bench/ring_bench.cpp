// Ring attention benchmarks (docs/performance.md, "Ring"): ring wall time against the single-rank
// kernel on the same work, the communication left exposed, causal load balance per layout, and
// per-rank peak memory. A summary of the figures (ratios of medians measured in this run)
// is printed after the Google Benchmark table.
//
// Full run with interleaved repetitions (the machine is shared; medians are the stable figure):
//   bench_ring --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
// Only the S=16384, P=2 overhead:  --benchmark_filter='SingleRank/S:16384/|S:16384/P:2/'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"
#include "cpattn/detail/cp.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/mask.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"

namespace cpattn {
namespace {

// The problem: B = 1, Hq = Hkv = 8, D = 128, causal, zigzag layout.
constexpr int64_t kHeads = 8;
constexpr int64_t kDim = 128;
constexpr int kSingleRankThreads = 2;  // the machine's cores; each in-process rank gets 1
constexpr int64_t kBalanceSeq = 8192;
constexpr int kBalanceRanks = 8;
constexpr int64_t kMemorySeq = 4096;

std::string key(const char* what, int64_t S, int P = 0) {
  std::string k = std::string(what) + "/S" + std::to_string(S);
  return P > 0 ? k + "/P" + std::to_string(P) : k;
}

struct Problem {
  explicit Problem(int64_t s)
      : S(s),
        q({1, s, kHeads, kDim}),
        k({1, s, kHeads, kDim}),
        v({1, s, kHeads, kDim}),
        dout({1, s, kHeads, kDim}) {
    params.causal = true;
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (Tensor* t : {&q, &k, &v, &dout}) {
      for (float& x : t->span()) x = normal(gen);
    }
  }
  int64_t S;
  Tensor q, k, v, dout;  // whole sequence, BSHD
  AttentionParams params;
  RngState rng{7, 0};
};

// Inputs are made once per sequence length and shared by every benchmark and repetition.
const Problem& problem(int64_t S) {
  static std::map<int64_t, std::unique_ptr<Problem>> cache;
  auto& slot = cache[S];
  if (!slot) slot = std::make_unique<Problem>(S);
  return *slot;
}

// Single-rank kernel forward + backward with kSingleRankThreads threads; returns seconds.
double time_single(const Problem& p) {
  std::vector<int64_t> pos(static_cast<size_t>(p.S));
  for (int64_t i = 0; i < p.S; ++i) pos[static_cast<size_t>(i)] = i;
  const AttentionInputs in{p.q.view(), p.k.view(), p.v.view(), pos, pos, {}, {}};
  const KernelOptions options{kSingleRankThreads};
  const Stopwatch start;
  const KernelForwardResult f = attention_kernel_forward(in, p.params, p.rng, options);
  const AttentionGradients g = attention_kernel_backward(in, p.params, p.rng, p.dout.view(),
                                                         f.out.view(), f.lse.span(), options);
  benchmark::DoNotOptimize(g.dq.data());
  return start.seconds();
}

struct RingTiming {
  double wall = 0;         // slowest rank, barrier to end of backward
  CpStats busiest;         // stats of the slowest rank
  int64_t peak_bytes = 0;  // largest per-rank peak of live bytes
};

// Ring forward + backward over P in-process ranks, 1 kernel thread each, zigzag layout; with
// `workspaces` (one per rank), the ring borrows its buffers from them (CpOptions::workspace).
RingTiming time_ring(const Problem& p, int P,
                     std::vector<AttentionWorkspace>* workspaces = nullptr) {
  RingTiming result;
  std::mutex mu;
  run_ranks(P, [&](Communicator& comm) {
    const SequenceSharding s = SequenceSharding::of(Layout::kZigzag, p.S, P, comm.rank());
    MemoryCounter* mem = &comm.memory();
    const Tensor q = shard_tensor(p.q.view(), s, s.cp_rank, mem);
    const Tensor k = shard_tensor(p.k.view(), s, s.cp_rank, mem);
    const Tensor v = shard_tensor(p.v.view(), s, s.cp_rank, mem);
    const Tensor dout = shard_tensor(p.dout.view(), s, s.cp_rank, mem);
    CpStats stats;
    CpOptions options;
    options.stats = &stats;
    if (workspaces != nullptr) options.workspace = &(*workspaces)[static_cast<size_t>(comm.rank())];
    comm.barrier();
    const Stopwatch start;
    const detail::CpForwardResult f = detail::ring_attention_forward(
        comm, q.view(), k.view(), v.view(), s, s, p.params, p.rng, options);
    const AttentionGradients g =
        detail::ring_attention_backward(comm, dout.view(), q.view(), k.view(), v.view(),
                                        f.out.view(), f.lse.span(), s, s, p.params, f.rng, options);
    const double wall = start.seconds();
    std::lock_guard<std::mutex> lock(mu);
    if (wall > result.wall) {
      result.wall = wall;
      result.busiest = stats;
    }
    result.peak_bytes = std::max(result.peak_bytes, comm.memory().stats().peak_bytes);
  });
  return result;
}

// The same messages as one ring forward + backward (P - 1 k/v blocks twice, P dk/dv blocks),
// with no compute in between: the time the transfers take when nothing hides them.
double time_transfers_only(int64_t S, int P) {
  double worst = 0;
  std::mutex mu;
  run_ranks(P, [&](Communicator& comm) {
    const int r = comm.rank();
    const int64_t floats =
        2 * shard_length(SequenceSharding::of(Layout::kZigzag, S, P, 0), 0) * kHeads * kDim;  // k|v
    Tensor a({floats}, &comm.memory()), b({floats}, &comm.memory());
    comm.barrier();
    const Stopwatch start;
    const int hops = 2 * (P - 1) + P;
    for (int s = 0; s < hops; ++s) {
      Request send = comm.isend(std::span<const float>(a.span()), (r + 1) % P, s);
      Request recv = comm.irecv(b.span(), (r + P - 1) % P, s);
      recv.wait();
      send.wait();
    }
    const double t = start.seconds();
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, t);
  });
  return worst;
}

void BM_SingleRank(benchmark::State& state) {
  const int64_t S = state.range(0);
  const Problem& p = problem(S);
  for (auto _ : state) {
    const double t = time_single(p);
    state.SetIterationTime(t);
    bench::record(key("single", S), t);
  }
}

// Per-rank workspaces of the (S, P) runs, kept across repetitions as a training loop keeps them
// across layers and steps: only the first run touches fresh memory.
std::vector<AttentionWorkspace>& workspaces(int64_t S, int P) {
  static std::map<std::pair<int64_t, int>, std::unique_ptr<std::vector<AttentionWorkspace>>> held;
  auto& slot = held[{S, P}];
  if (!slot) slot = std::make_unique<std::vector<AttentionWorkspace>>(static_cast<size_t>(P));
  return *slot;
}

// Ring forward + backward; range(2) = 1: with the per-rank workspaces of workspaces(S, P).
void BM_Ring(benchmark::State& state) {
  const int64_t S = state.range(0);
  const int P = static_cast<int>(state.range(1));
  const bool ws = state.range(2) != 0;
  const Problem& p = problem(S);
  const char* name = ws ? "ring_ws" : "ring";
  for (auto _ : state) {
    const RingTiming t = time_ring(p, P, ws ? &workspaces(S, P) : nullptr);
    state.SetIterationTime(t.wall);
    bench::record(key(name, S, P), t.wall);
    bench::record(key(name, S, P) + "/kernel", t.busiest.kernel_seconds);
    bench::record(key(name, S, P) + "/comm", t.busiest.comm_seconds);
    bench::record(key(name, S, P) + "/other", t.busiest.other_seconds);
    state.counters["kernel_s"] = t.busiest.kernel_seconds;
    state.counters["comm_s"] = t.busiest.comm_seconds;
    state.counters["other_s"] = t.busiest.other_seconds;
  }
}

void BM_TransfersOnly(benchmark::State& state) {
  const int64_t S = state.range(0);
  const int P = static_cast<int>(state.range(1));
  for (auto _ : state) {
    const double t = time_transfers_only(S, P);
    state.SetIterationTime(t);
    bench::record(key("xfer", S, P), t);
  }
}

// Visible (q, k) pairs per rank, counted exactly (deterministic: one iteration is enough).
void BM_LoadBalance(benchmark::State& state) {
  const Layout layout = static_cast<Layout>(state.range(0));
  AttentionParams causal;
  causal.causal = true;
  std::vector<int64_t> all(static_cast<size_t>(kBalanceSeq));
  for (int64_t i = 0; i < kBalanceSeq; ++i) all[static_cast<size_t>(i)] = i;
  for (auto _ : state) {
    std::vector<double> n;
    for (int r = 0; r < kBalanceRanks; ++r) {
      const auto q =
          shard_token_indices(SequenceSharding::of(layout, kBalanceSeq, kBalanceRanks, r), r);
      n.push_back(static_cast<double>(count_visible_pairs(q, all, {}, {}, causal)));
    }
    double mean = 0;
    for (double x : n) mean += x / kBalanceRanks;
    const double busiest = *std::max_element(n.begin(), n.end()) / mean;
    const double least = *std::min_element(n.begin(), n.end()) / mean;
    state.counters["busiest_over_mean"] = busiest;
    bench::record(std::string("balance_max/") + layout_name(layout), busiest);
    bench::record(std::string("balance_min/") + layout_name(layout), least);
  }
  state.SetLabel(layout_name(layout));
}

void BM_RankPeakMemory(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const Problem& p = problem(kMemorySeq);
  for (auto _ : state) {
    const double mib = static_cast<double>(time_ring(p, P).peak_bytes) / 1048576.0;
    state.counters["peak_MiB"] = mib;
    bench::record(key("peak_mib", kMemorySeq, P), mib);
  }
}

BENCHMARK(BM_SingleRank)
    ->ArgNames({"S"})
    ->Args({8192})
    ->Args({16384})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);
void ring_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"S", "P"})->Args({8192, 2})->Args({8192, 4});
  b->Args({16384, 2})->Args({16384, 4})->Args({16384, 8});
  b->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
}
// ring_args with the workspace argument: per-call buffers (0) and kept workspaces (1).
void ring_ws_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"S", "P", "ws"});
  for (int64_t ws : {0, 1}) {
    b->Args({8192, 2, ws})->Args({8192, 4, ws});
    b->Args({16384, 2, ws})->Args({16384, 4, ws})->Args({16384, 8, ws});
  }
  b->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
}
BENCHMARK(BM_Ring)->Apply(ring_ws_args);
BENCHMARK(BM_TransfersOnly)->Apply(ring_args);
BENCHMARK(BM_LoadBalance)
    ->ArgNames({"layout"})
    ->Arg(static_cast<int>(Layout::kZigzag))
    ->Arg(static_cast<int>(Layout::kStriped))
    ->Arg(static_cast<int>(Layout::kContiguous))
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RankPeakMemory)
    ->ArgNames({"P"})
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void print_overhead() {
  if (std::isnan(bench::median_of(key("single", 16384))) &&
      std::isnan(bench::median_of(key("single", 8192))))
    return;  // the baselines were filtered out: no ratios to print
  std::printf(
      "\nOverhead, causal zigzag, B=1, Hq=Hkv=%lld, D=%lld, forward+backward: P ranks x 1 thread"
      " vs the single-rank kernel with %d threads (target at S = 8192 and 16384, P = 2: <= 1.03)\n",
      static_cast<long long>(kHeads), static_cast<long long>(kDim), kSingleRankThreads);
  std::printf(
      "| S | P | buffers | single-rank s | ring wall s | ring / single | kernel s | comm s |"
      " comm / wall | other s | transfers alone s | transfer hidden "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t S : {8192, 16384}) {
    for (int P : {2, 4, 8}) {
      for (const char* name : {"ring", "ring_ws"}) {
        const std::string k = key(name, S, P);
        const double ring = bench::median_of(k);
        if (std::isnan(ring)) continue;
        const double single = bench::median_of(key("single", S));
        const double comm = bench::median_of(k + "/comm");
        const double xfer = bench::median_of(key("xfer", S, P));
        // comm is the time the busiest rank spent inside isend/irecv/wait (copying, or waiting
        // for a peer that is still computing): what was not hidden.
        const double hidden = xfer > 0 ? std::clamp(1.0 - comm / xfer, 0.0, 1.0) : NAN;
        std::printf(
            "| %lld | %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f%% | %.3f | %.4f | %.0f%% "
            "|\n",
            static_cast<long long>(S), P, name[4] == '_' ? "workspace" : "per call", single, ring,
            ring / single, bench::median_of(k + "/kernel"), comm, 100.0 * comm / ring,
            bench::median_of(k + "/other"), xfer, 100.0 * hidden);
      }
    }
  }
}

void print_balance() {
  if (std::isnan(bench::median_of("balance_max/zigzag"))) return;
  std::printf(
      "\nLoad balance, causal, S=%lld, P=%d, visible (q, k) pairs per rank (target <= 1.05 for"
      " zigzag and striped)\n| layout | busiest / mean | least / mean |\n|---|---|---|\n",
      static_cast<long long>(kBalanceSeq), kBalanceRanks);
  for (Layout layout : {Layout::kZigzag, Layout::kStriped, Layout::kContiguous}) {
    const double busiest = bench::median_of(std::string("balance_max/") + layout_name(layout));
    if (std::isnan(busiest)) continue;
    std::printf("| %s | %.4f | %.4f |\n", layout_name(layout), busiest,
                bench::median_of(std::string("balance_min/") + layout_name(layout)));
  }
}

void print_memory() {
  const double base = bench::median_of(key("peak_mib", kMemorySeq, 1));
  if (std::isnan(base)) return;
  std::printf(
      "\nPer-rank peak live bytes, causal zigzag, S=%lld, H=%lld, D=%lld (O(S/P): x P stays"
      " flat)\n| P | peak MiB per rank | vs P=1 | x P |\n|---|---|---|---|\n",
      static_cast<long long>(kMemorySeq), static_cast<long long>(kHeads),
      static_cast<long long>(kDim));
  for (int P : {1, 2, 4}) {
    const double mib = bench::median_of(key("peak_mib", kMemorySeq, P));
    if (std::isnan(mib)) continue;
    std::printf("| %d | %.2f | %.3f | %.2f |\n", P, mib, mib / base, P * mib / base);
  }
}

}  // namespace
}  // namespace cpattn

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  cpattn::print_overhead();
  cpattn::print_balance();
  cpattn::print_memory();
  benchmark::Shutdown();
  return 0;
}
