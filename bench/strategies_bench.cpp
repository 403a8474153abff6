// CP strategies benchmark (docs/performance.md, "Strategies"): for every strategy at the
// issue's shapes (B = 1, Hq = 8, Hkv in {8, 2}, D = 128, causal, zigzag), forward + backward
// wall time (slowest rank), bytes sent and peak memory per rank, next to the planner's prediction
// (plan.h, with the link and kernel models measured in the same run) and whether its pick was the
// fastest measured strategy (by the median of each repetition's time relative to that
// repetition's mean, which cancels the host's drift). Medians over interleaved repetitions. A table
// program: a call is a group-wide event timed across P ranks (threads, or processes under mpirun).
//   bench_strategies                          P = 4 in-process ranks, S = 8192, 3 repetitions
//   bench_strategies --seq 8192,32768 --reps 1 --kv 2
//   bench_strategies --only ring,ulysses      some strategies only (no pick is judged)
//   mpirun -n 4 bench_strategies              the same over MPI processes (one rank each)
//   bench_strategies --ulysses-check          Ulysses at P = 2 vs the single-rank kernel
//   bench_strategies --docs-check             document-aware ring bytes at P = 8
//   bench_strategies --balance-check          per-rank load of packed documents at P = 8,
//                                             S = 32768: doc_zigzag vs zigzag (--seq S, --reps N,
//                                             --docs-mean N: mean document length, S/16)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.h"
#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "cpattn/layout.h"
#include "cpattn/mask.h"
#include "cpattn/plan.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#ifdef CPATTN_HAVE_MPI
#include "cpattn/mpi_communicator.h"
#endif

namespace cpattn {
namespace {

constexpr int64_t kHeads = 8, kDim = 128;

// Runs fn on every rank of the group (in-process ranks, or this process's MPI rank).
using Group = std::function<void(const std::function<void(Communicator&)>&)>;

struct Options {
  std::vector<int64_t> seqs = {8192};
  bool seqs_given = false;  ///< --seq was given (--balance-check: else S = 32768)
  std::vector<int64_t> kv = {8, 2};
  int reps = 3;
  int ranks = 4;
  bool ulysses_check = false;
  bool docs_check = false;
  bool balance_check = false;
  int64_t docs_mean = 0;       ///< --balance-check: mean document length (0: S / 16)
  std::vector<Strategy> only;  ///< empty: every candidate strategy
};

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoll(item));
  return v;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Rank `rank`'s shard [1, S_r, H, D] of a whole tensor whose element (s, h, d) is a fixed
// pseudo-random value in [-1, 1) of (id, global token, h, d): no rank builds the whole tensor.
Tensor shard(int id, const SequenceSharding& seq, int64_t H, int64_t D, MemoryCounter* mem) {
  const std::vector<int64_t> idx = shard_token_indices(seq, seq.cp_rank);
  Tensor t({1, static_cast<int64_t>(idx.size()), H, D}, mem);
  float* p = t.data();
  for (const int64_t s : idx)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const uint64_t bits =
            splitmix((static_cast<uint64_t>(id) << 56) ^ (static_cast<uint64_t>(s) << 20) ^
                     static_cast<uint64_t>(h * D + d));
        *p++ = static_cast<float>(static_cast<double>(bits >> 11) * 0x1p-52 - 1.0);
      }
  return t;
}

// max over ranks (every rank passes its own value).
double group_max(Communicator& comm, double mine) {
  std::vector<double> all(static_cast<size_t>(comm.size()), 0.0);
  all[static_cast<size_t>(comm.rank())] = mine;
  comm.allreduce_sum(std::span<double>(all));
  return *std::max_element(all.begin(), all.end());
}

struct Measured {
  double seconds = 0, bytes = 0, peak = 0;
  double kernel_seconds = 0, comm_seconds = 0;  ///< the slowest rank's CpStats
};

// One forward + backward of `strategy` on every rank; the slowest rank's time, the largest
// bytes sent and peak bytes allocated during the call (above what was live before it).
Measured run_call(Communicator& comm, const PlanProblem& p, const Strategy& strategy,
                  bool document_aware = true, int threads = 1,
                  AttentionWorkspace* workspace = nullptr) {
  SequenceSharding seq = SequenceSharding::of(p.layout, p.S, comm.size(), comm.rank());
  for (size_t d = 0; d < p.doc_lengths.size(); ++d)
    seq.docs.insert(seq.docs.end(), static_cast<size_t>(p.doc_lengths[d]), static_cast<int64_t>(d));
  MemoryCounter* mem = &comm.memory();
  const Tensor q = shard(1, seq, p.Hq, p.Dqk, mem), k = shard(2, seq, p.Hkv, p.Dqk, mem),
               v = shard(3, seq, p.Hkv, p.Dv, mem), dout = shard(4, seq, p.Hq, p.Dv, mem);
  CpStats stats;
  CpOptions options;
  options.strategy = strategy;
  options.stats = &stats;
  options.document_aware = document_aware;
  options.num_threads = threads;
  options.workspace = workspace;
  comm.barrier();
  const int64_t live = mem->stats().live_bytes;
  mem->reset_peak();
  const Stopwatch watch;
  {
    const detail::CpForwardResult f = detail::cp_attention_forward(
        comm, q.view(), k.view(), v.view(), seq, seq, p.params, {7, 0}, options);
    const AttentionGradients g =
        detail::cp_attention_backward(comm, dout.view(), q.view(), k.view(), v.view(), f.out.view(),
                                      f.lse.span(), seq, seq, p.params, f.rng, options);
  }
  const double seconds = watch.seconds();
  const double peak = static_cast<double>(mem->stats().peak_bytes - live);
  return {group_max(comm, seconds), group_max(comm, static_cast<double>(stats.bytes_sent)),
          group_max(comm, peak), group_max(comm, stats.kernel_seconds),
          group_max(comm, stats.comm_seconds)};
}

PlanProblem problem_of(int64_t S, int64_t hkv, int P) {
  PlanProblem p;
  p.S = S;
  p.Hq = kHeads;
  p.Hkv = hkv;
  p.Dqk = p.Dv = kDim;
  p.params.causal = true;
  p.layout = Layout::kZigzag;
  p.cp_size = P;
  return p;
}

std::string key(const char* what, int64_t S, int64_t hkv, const Strategy& s) {
  return std::string(what) + "/" + std::to_string(S) + "/" + std::to_string(hkv) + "/" +
         strategy_name(s);
}

double mib(double bytes) { return bytes / 1048576.0; }

// The strategies table: every (S, Hkv, strategy) `reps` times, interleaved, then medians, the
// planner's predictions and picks. Printed by `lead`.
void strategies_table(const Group& group, int P, bool lead, const Options& o, const char* backend) {
  std::map<std::string, std::vector<StrategyEstimate>> plans;
  for (const int64_t S : o.seqs) {
    for (const int64_t hkv : o.kv) {
      const PlanProblem p = problem_of(S, hkv, P);
      group([&](Communicator& comm) {
        const MachineModel m = measure_models(comm, p);
        if (comm.rank() == 0) {
          plans[key("plan", S, hkv, Strategy::ring())] = plan_strategies(p, m.link, m.kernel);
          if (lead) {
            std::printf(
                "models S=%lld Hkv=%lld: link %.2f GB/s, %.1f us, overlap %.2f; kernel %.1f "
                "GFLOP/s per rank, %d at once; copies %.2f GB/s\n",
                static_cast<long long>(S), static_cast<long long>(hkv),
                m.link.bandwidth_bytes_per_s / 1e9, m.link.latency_s * 1e6, m.link.overlap,
                m.kernel.flops_per_s / 1e9, m.kernel.concurrent_ranks,
                m.kernel.copy_bytes_per_s / 1e9);
            std::fflush(stdout);
          }
        }
      });
    }
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    for (const int64_t S : o.seqs) {
      for (const int64_t hkv : o.kv) {
        const PlanProblem p = problem_of(S, hkv, P);
        for (const Strategy& s : candidate_strategies(P)) {
          try {
            check_strategy(s, P, p.Hq, p.Hkv);
          } catch (const Error&) {
            continue;
          }
          if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), s) == o.only.end()) {
            continue;
          }
          group([&](Communicator& comm) {
            const Measured m = run_call(comm, p, s);
            if (comm.rank() != 0) return;
            bench::record(key("s", S, hkv, s), m.seconds);
            bench::record(key("bytes", S, hkv, s), m.bytes);
            bench::record(key("peak", S, hkv, s), m.peak);
            if (lead) {
              std::printf(
                  "rep %d S=%lld Hkv=%lld %s: %.2f s (slowest rank's kernel %.2f s, "
                  "communication %.2f s)\n",
                  rep, static_cast<long long>(S), static_cast<long long>(hkv),
                  strategy_name(s).c_str(), m.seconds, m.kernel_seconds, m.comm_seconds);
              std::fflush(stdout);
            }
          });
        }
      }
    }
  }
  if (!lead) return;
  std::printf(
      "\nStrategies, %s, P=%d, B=1, Hq=%lld, D=%lld, causal, zigzag, forward + backward (medians "
      "of %d; relative: time / its round's mean, median)\n| S | Hkv | strategy | time s | "
      "relative | predicted s | error | sent MiB/rank | predicted MiB | peak MiB/rank | "
      "predicted peak MiB | fastest | planner pick |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      backend, P, static_cast<long long>(kHeads), static_cast<long long>(kDim), o.reps);
  int cases = 0, picked_fastest = 0, picked_tied = 0, within = 0, rows = 0;
  for (const int64_t S : o.seqs) {
    for (const int64_t hkv : o.kv) {
      const std::vector<StrategyEstimate>& plan = plans[key("plan", S, hkv, Strategy::ring())];
      const Strategy pick = recommend(plan).strategy;
      const auto measured = [&](const StrategyEstimate& e) {
        return e.feasible && (o.only.empty() ||
                              std::find(o.only.begin(), o.only.end(), e.strategy) != o.only.end());
      };
      // Each strategy's time relative to its round (a repetition runs every strategy in turn):
      // time / the round's mean time, so the host's drift between rounds cancels; the fastest
      // is the strategy with the smallest median of these.
      std::map<std::string, std::vector<double>> relative;
      for (int rep = 0; rep < o.reps; ++rep) {
        double sum = 0;
        int n = 0;
        for (const StrategyEstimate& e : plan) {
          if (!measured(e)) continue;
          sum += bench::samples()[key("s", S, hkv, e.strategy)][static_cast<size_t>(rep)];
          ++n;
        }
        for (const StrategyEstimate& e : plan) {
          if (!measured(e)) continue;
          const double t = bench::samples()[key("s", S, hkv, e.strategy)][static_cast<size_t>(rep)];
          relative[strategy_name(e.strategy)].push_back(t / (sum / n));
        }
      }
      const auto median_relative = [&](const Strategy& st) {
        std::vector<double> v = relative[strategy_name(st)];
        std::sort(v.begin(), v.end());
        const size_t m = v.size() / 2;
        return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
      };
      Strategy fastest;
      double best = 1e30;
      for (const StrategyEstimate& e : plan) {
        if (!measured(e)) continue;
        const double r = median_relative(e.strategy);
        if (r < best) best = r, fastest = e.strategy;
      }
      for (const StrategyEstimate& e : plan) {
        if (!measured(e)) continue;
        const double t = bench::median_of(key("s", S, hkv, e.strategy));
        const double err = e.seconds / t - 1.0;
        ++rows;
        within += std::fabs(err) <= 0.25 ? 1 : 0;
        std::printf(
            "| %lld | %lld | %s | %.2f | %.3f | %.2f | %+.0f%% | %.1f | %.1f | %.1f | %.1f | %s | "
            "%s |\n",
            static_cast<long long>(S), static_cast<long long>(hkv),
            strategy_name(e.strategy).c_str(), t, median_relative(e.strategy), e.seconds, 100 * err,
            mib(bench::median_of(key("bytes", S, hkv, e.strategy))), mib(e.bytes_sent),
            mib(bench::median_of(key("peak", S, hkv, e.strategy))), mib(e.peak_bytes),
            e.strategy == fastest ? "yes" : "", e.strategy == pick ? "yes" : "");
      }
      if (!o.only.empty()) continue;  // some strategies were not run: no pick to judge
      ++cases;
      if (pick == fastest) {
        ++picked_fastest;
        ++picked_tied;
      } else {
        // With two or more repetitions: whether the two strategies' ranges of relative times
        // overlap, so that this machine's noise cannot tell them apart.
        const std::vector<double>& a = relative[strategy_name(pick)];
        const std::vector<double>& b = relative[strategy_name(fastest)];
        const bool tie =
            a.size() > 1 && b.size() > 1 &&
            *std::min_element(a.begin(), a.end()) <= *std::max_element(b.begin(), b.end());
        picked_tied += tie ? 1 : 0;
        std::printf("|  |  | (pick %s is %.1f%% slower than %s%s) ||||||||||\n",
                    strategy_name(pick).c_str(), 100 * (median_relative(pick) / best - 1),
                    strategy_name(fastest).c_str(), tie ? "; their repetition ranges overlap" : "");
      }
    }
  }
  std::printf(
      "\nplanner: prediction within 25%% of the measured time in %d of %d rows; its pick was "
      "the fastest measured strategy in %d of %d cases, and the fastest or one whose relative "
      "times overlap the fastest's in %d of %d\n",
      within, rows, picked_fastest, cases, picked_tied, cases);
}

// Ulysses at P = 2 (one thread per rank) against the single-rank kernel with 2 threads on the
// same problem (the target: within 1.10x on 2 cores), with per-call buffers and with
// per-rank AttentionWorkspaces kept across the repetitions (as a training loop keeps them). Each
// repetition runs the three in a rotating order, so drifting load hits each alike.
void ulysses_check(const Options& o) {
  const int64_t S = o.seqs.front();
  const PlanProblem p = problem_of(S, kHeads, 1);
  std::array<AttentionWorkspace, 2> workspaces;
  const auto ulysses = [&](const char* name, bool with_workspace) {
    run_ranks(2, [&](Communicator& comm) {
      AttentionWorkspace* ws =
          with_workspace ? &workspaces[static_cast<size_t>(comm.rank())] : nullptr;
      const Measured m = run_call(comm, p, Strategy::ulysses(), true, 1, ws);
      if (comm.rank() != 0) return;
      bench::record(name, m.seconds);
      bench::record(std::string(name) + "_kernel", m.kernel_seconds);
      bench::record(std::string(name) + "_comm", m.comm_seconds);
    });
  };
  const std::function<void()> runs[] = {
      [&] {
        SingleRankCommunicator one;
        bench::record("single", run_call(one, p, Strategy::ring(), true, 2).seconds);
      },
      [&] { ulysses("ulysses2", false); }, [&] { ulysses("ulysses2_ws", true); }};
  for (int rep = 0; rep < o.reps; ++rep) {
    for (int i = 0; i < 3; ++i) runs[(rep + i) % 3]();
    std::printf(
        "rep %d: single %.2f s, ulysses P=2 %.2f s (kernel %.2f s, communication %.2f s), with "
        "workspaces %.2f s\n",
        rep, bench::samples()["single"].back(), bench::samples()["ulysses2"].back(),
        bench::samples()["ulysses2_kernel"].back(), bench::samples()["ulysses2_comm"].back(),
        bench::samples()["ulysses2_ws"].back());
    std::fflush(stdout);
  }
  const double single = bench::median_of("single");
  std::printf(
      "\nUlysses, P=2 x 1 thread vs the single-rank kernel with 2 threads, S=%lld, Hq=Hkv=%lld, "
      "D=%lld, causal, forward + backward (medians of %d; target <= 1.10)\n| buffers | "
      "single-rank s | ulysses s | ulysses / single | ulysses kernel s (slowest rank) | "
      "communication s |\n|---|---|---|---|---|---|\n",
      static_cast<long long>(S), static_cast<long long>(kHeads), static_cast<long long>(kDim),
      o.reps);
  for (const char* name : {"ulysses2", "ulysses2_ws"}) {
    const std::string n = name;
    const double u = bench::median_of(n);
    std::printf("| %s | %.2f | %.2f | %.3f | %.2f | %.2f |\n",
                n == "ulysses2" ? "per call" : "workspace", single, u, u / single,
                bench::median_of(n + "_kernel"), bench::median_of(n + "_comm"));
  }
}

// Bytes the document-aware ring sends at P = 8 against the plain ring, documents of mean length
// S / 16 (lengths S/32 .. 3S/32), causal and not; forward + backward, summed over the ranks.
void docs_check() {
  constexpr int P = 8;
  constexpr int64_t S = 4096;
  std::printf(
      "\nDocument-aware ring, P=%d, S=%lld, documents of mean length S/16, contiguous layout, "
      "bytes sent by all ranks, forward + backward (target <= 0.30)\n| mask | plain MiB | "
      "document-aware MiB | ratio |\n|---|---|---|---|\n",
      P, static_cast<long long>(S));
  for (const bool causal : {true, false}) {
    PlanProblem p = problem_of(S, 2, P);
    p.Hq = 2;
    p.Dqk = p.Dv = 32;
    p.layout = Layout::kContiguous;
    p.params.causal = causal;
    for (int64_t at = 0, i = 0; at < S; ++i) {
      const int64_t l = std::min(S - at, S / 32 + (i * 97) % (S / 16 + 1));
      p.doc_lengths.push_back(l);
      at += l;
    }
    double bytes[2] = {0, 0};
    for (const bool aware : {false, true}) {
      run_ranks(P, [&](Communicator& comm) {
        CpStats stats;
        SequenceSharding seq = SequenceSharding::of(p.layout, p.S, P, comm.rank());
        for (size_t d = 0; d < p.doc_lengths.size(); ++d)
          seq.docs.insert(seq.docs.end(), static_cast<size_t>(p.doc_lengths[d]),
                          static_cast<int64_t>(d));
        MemoryCounter* mem = &comm.memory();
        const Tensor q = shard(1, seq, p.Hq, p.Dqk, mem), k = shard(2, seq, p.Hkv, p.Dqk, mem),
                     v = shard(3, seq, p.Hkv, p.Dv, mem);
        CpOptions options;
        options.stats = &stats;
        options.document_aware = aware;
        const detail::CpForwardResult f = detail::ring_attention_forward(
            comm, q.view(), k.view(), v.view(), seq, seq, p.params, {7, 0}, options);
        detail::ring_attention_backward(comm, f.out.view(), q.view(), k.view(), v.view(),
                                        f.out.view(), f.lse.span(), seq, seq, p.params, f.rng,
                                        options);
        std::vector<double> all(static_cast<size_t>(P), 0.0);
        all[static_cast<size_t>(comm.rank())] = static_cast<double>(stats.bytes_sent);
        comm.allreduce_sum(std::span<double>(all));
        if (comm.rank() == 0) {
          for (double b : all) bytes[aware ? 1 : 0] += b;
        }
      });
    }
    std::printf("| %s | %.2f | %.2f | %.3f |\n", causal ? "causal documents" : "documents",
                mib(bytes[0]), mib(bytes[1]), bytes[1] / bytes[0]);
  }
}

// The CPU seconds this thread has run (CLOCK_THREAD_CPUTIME_ID): a rank's own compute, whatever
// share of the cores the other in-process ranks take (they block on condition variables while
// they wait for a message, so waiting costs no CPU time).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// busiest / mean of per-rank values.
double busiest_over_mean(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v;
  return *std::max_element(x.begin(), x.end()) * static_cast<double>(x.size()) / sum;
}

// Per-rank load of the ring over packed documents of mixed lengths (docs/performance.md, "Load\n//
// balance"): P = 8, S = 32768 (or --seq's first value), causal, document lengths drawn
// exponentially with mean S/16 or --docs-mean (std::mt19937_64 seed 1,
// std::exponential_distribution, floored, at least 1, the last one cut to S), Hq = 4, Hkv = 1,
// Dqk = Dv = 64, one kernel thread per
// rank. For doc_zigzag and zigzag, interleaved over --reps runs: busiest / mean over the ranks
// of the visible (query, key) pairs (count_visible_pairs), of the pairs in 128 x 128 tiles the
// mask does not hide (count_computed_pairs of every (q shard, k/v block), the kernel's tiling rule
// and tile skipping: what the kernel computes), of each rank's CPU seconds in the forward +
// backward (thread CPU time: the kernel's work, unaffected by 8 ranks sharing the host's cores) and
// of CpStats::kernel_seconds (wall time inside kernel calls, which the sharing of cores distorts);
// then the busiest rank's CPU seconds of doc_zigzag over zigzag's.
void balance_check(const Options& o) {
  constexpr int P = 8;
  constexpr int64_t kTile = 128;
  const int64_t S = o.seqs_given ? o.seqs.front() : 32768;
  PlanProblem p = problem_of(S, 1, P);
  p.Hq = 4;
  p.Dqk = p.Dv = 64;
  std::mt19937_64 gen(1);
  const int64_t mean = o.docs_mean > 0 ? o.docs_mean : S / 16;
  std::exponential_distribution<double> length(1.0 / static_cast<double>(mean));
  for (int64_t at = 0; at < S;) {
    const int64_t l = std::min(S - at, std::max<int64_t>(1, static_cast<int64_t>(length(gen))));
    p.doc_lengths.push_back(l);
    at += l;
  }
  std::vector<int64_t> docs;
  for (size_t d = 0; d < p.doc_lengths.size(); ++d)
    docs.insert(docs.end(), static_cast<size_t>(p.doc_lengths[d]), static_cast<int64_t>(d));
  std::vector<int64_t> all(static_cast<size_t>(S));
  std::iota(all.begin(), all.end(), int64_t{0});
  std::printf(
      "\nLoad balance, P=%d, S=%lld, causal, %zu documents of exponential lengths (mean %lld, "
      "seed 1; longest %lld), Hq=%lld Hkv=%lld D=%lld, ring, %d rep(s)\n",
      P, static_cast<long long>(S), p.doc_lengths.size(), static_cast<long long>(mean),
      static_cast<long long>(*std::max_element(p.doc_lengths.begin(), p.doc_lengths.end())),
      static_cast<long long>(p.Hq), static_cast<long long>(p.Hkv), static_cast<long long>(p.Dqk),
      o.reps);
  const std::vector<Layout> layouts = {Layout::kDocZigzag, Layout::kZigzag};
  std::map<Layout, std::vector<double>> visible, tiles, cpu_ratio, wall_ratio, busiest_cpu;
  for (const Layout layout : layouts) {
    SequenceSharding seq = SequenceSharding::of(layout, S, P, 0);
    seq.docs = docs;
    std::vector<std::vector<int64_t>> pos(P), doc(P);
    for (int r = 0; r < P; ++r) {
      pos[static_cast<size_t>(r)] = seq.local_positions(r);
      doc[static_cast<size_t>(r)] = seq.local_docs(r);
    }
    for (int r = 0; r < P; ++r) {
      const auto& qp = pos[static_cast<size_t>(r)];
      const auto& qd = doc[static_cast<size_t>(r)];
      visible[layout].push_back(
          static_cast<double>(count_visible_pairs(qp, all, qd, docs, p.params)));
      double computed = 0;
      for (int b = 0; b < P; ++b) {
        computed += static_cast<double>(count_computed_pairs(qp, pos[static_cast<size_t>(b)], qd,
                                                             doc[static_cast<size_t>(b)], p.params,
                                                             kTile, kTile));
      }
      tiles[layout].push_back(computed);
    }
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    for (const Layout layout : layouts) {
      p.layout = layout;
      std::vector<double> cpu(P), wall(P);
      run_ranks(P, [&](Communicator& comm) {
        SequenceSharding seq = SequenceSharding::of(layout, S, P, comm.rank());
        seq.docs = docs;
        MemoryCounter* mem = &comm.memory();
        const Tensor q = shard(1, seq, p.Hq, p.Dqk, mem), k = shard(2, seq, p.Hkv, p.Dqk, mem),
                     v = shard(3, seq, p.Hkv, p.Dv, mem), dout = shard(4, seq, p.Hq, p.Dv, mem);
        CpStats stats;
        CpOptions options;
        options.stats = &stats;
        comm.barrier();
        const double cpu0 = thread_cpu_seconds();
        const detail::CpForwardResult f = detail::cp_attention_forward(
            comm, q.view(), k.view(), v.view(), seq, seq, p.params, {7, 0}, options);
        detail::cp_attention_backward(comm, dout.view(), q.view(), k.view(), v.view(), f.out.view(),
                                      f.lse.span(), seq, seq, p.params, f.rng, options);
        cpu[static_cast<size_t>(comm.rank())] = thread_cpu_seconds() - cpu0;
        wall[static_cast<size_t>(comm.rank())] = stats.kernel_seconds;
      });
      cpu_ratio[layout].push_back(busiest_over_mean(cpu));
      wall_ratio[layout].push_back(busiest_over_mean(wall));
      busiest_cpu[layout].push_back(*std::max_element(cpu.begin(), cpu.end()));
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "| layout | visible pairs busiest/mean | computed tile pairs busiest/mean | tile pairs / "
      "visible pairs | rank CPU s busiest/mean | CpStats kernel_seconds busiest/mean | busiest "
      "rank CPU s |\n|---|---|---|---|---|---|---|\n");
  for (const Layout layout : layouts) {
    double v = 0, t = 0;
    for (double x : visible[layout]) v += x;
    for (double x : tiles[layout]) t += x;
    std::printf("| %s | %.4f | %.4f | %.2f | %.4f | %.4f | %.2f |\n", layout_name(layout),
                busiest_over_mean(visible[layout]), busiest_over_mean(tiles[layout]), t / v,
                median(cpu_ratio[layout]), median(wall_ratio[layout]), median(busiest_cpu[layout]));
  }
  std::vector<double> speed;
  for (int rep = 0; rep < o.reps; ++rep) {
    speed.push_back(busiest_cpu[Layout::kDocZigzag][static_cast<size_t>(rep)] /
                    busiest_cpu[Layout::kZigzag][static_cast<size_t>(rep)]);
  }
  std::printf("busiest rank CPU s, doc_zigzag / zigzag (median of the runs' ratios): %.3f\n",
              median(speed));
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(ErrorCode::kInvalidArgument, a + " needs a value");
      return argv[++i];
    };
    if (a == "--seq") {
      o.seqs = parse_list(value());
      o.seqs_given = true;
    } else if (a == "--kv") {
      o.kv = parse_list(value());
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--ranks") {
      o.ranks = std::stoi(value());
    } else if (a == "--only") {
      std::stringstream in(value());
      std::string name;
      while (std::getline(in, name, ',')) o.only.push_back(parse_strategy(name));
    } else if (a == "--ulysses-check") {
      o.ulysses_check = true;
    } else if (a == "--docs-check") {
      o.docs_check = true;
    } else if (a == "--balance-check") {
      o.balance_check = true;
    } else if (a == "--docs-mean") {
      o.docs_mean = std::stoll(value());
    } else {
      throw Error(ErrorCode::kInvalidArgument,
                  "usage: bench_strategies [--seq S,...] [--kv H,...] [--reps N] [--ranks P] "
                  "[--only STRATEGY,...] [--ulysses-check] [--docs-check] [--balance-check "
                  "[--docs-mean N]]; "
                  "got " +
                      a);
    }
  }
  return o;
}

#ifdef CPATTN_HAVE_MPI
bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}
#endif

}  // namespace
}  // namespace cpattn

int main(int argc, char** argv) {
  using namespace cpattn;
  const Options o = parse(argc, argv);
#ifdef CPATTN_HAVE_MPI
  if (under_mpirun()) {
    return mpi_main(argc, argv, [&](MpiCommunicator& world) {
      world.set_timeout(std::chrono::seconds(3600));
      const Group group = [&world](const std::function<void(Communicator&)>& fn) { fn(world); };
      strategies_table(group, world.size(), world.rank() == 0, o, "MPI processes");
      return 0;
    });
  }
#endif
  if (o.ulysses_check) ulysses_check(o);
  if (o.docs_check) docs_check();
  if (o.balance_check) balance_check(o);
  if (o.ulysses_check || o.docs_check || o.balance_check) return 0;
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(3600);
  const Group group = [&](const std::function<void(Communicator&)>& fn) {
    run_ranks(o.ranks, fn, options);
  };
  strategies_table(group, o.ranks, true, o, "in-process ranks");
  return 0;
}
