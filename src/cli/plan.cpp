// `cpattn plan`: the planner of plan.h for a shape, mask and group size: every strategy's
// predicted per-rank compute, bytes moved, peak memory and time, and the recommended one. With
// --measure the kernel throughput, the rank-to-rank bandwidth and the copy rate are first measured
// on this machine (a short kernel run and in-process ring exchanges).
#include "cpattn/plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/docs_spec.h"
#include "cli/job.h"
#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"

namespace cpattn::cli {

namespace {

struct PlanOptions {
  PlanProblem problem;
  std::string layout = "zigzag";
  std::string docs;  // "300,5,700,19" or "mean:N"
  double bandwidth_gbs = 10;
  double latency_us = 10;
  double overlap = 1;
  double gflops = 20;
  double copy_gbs = 4;
  int cores = 0;
  bool measure = false;
  bool json = false;
  double timeout_s = 300;
};

std::string fmt_bytes(double b) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.1f MiB", b / 1048576.0);
  return s;
}

int run_plan(PlanOptions o) {
  refuse_mpirun_without_mpi("plan", std::nullopt);
  const std::chrono::milliseconds timeout = deadline(o.timeout_s);
  PlanProblem& p = o.problem;
  p.layout = parse_layout(o.layout);
  p.doc_lengths = parse_docs(o.docs, p.S);
  LinkModel link{o.bandwidth_gbs * 1e9, o.latency_us * 1e-6, o.overlap};
  KernelModel kernel{o.gflops * 1e9, o.cores, o.copy_gbs * 1e9};
  if (o.measure) {
    // On P in-process ranks of this machine, which share its cores.
    MachineModel m;
    RunRanksOptions options;
    options.timeout = timeout;
    run_ranks(
        p.cp_size,
        [&](Communicator& comm) {
          const MachineModel mine = measure_models(comm, p);
          if (comm.rank() == 0) m = mine;
        },
        options);
    link = m.link;
    kernel = m.kernel;
  }
  const std::vector<StrategyEstimate> estimates = plan_strategies(p, link, kernel);
  const StrategyEstimate& pick = recommend(estimates);
  if (o.json) {
    nlohmann::json doc;
    doc["models"] = {{"bandwidth_bytes_per_s", link.bandwidth_bytes_per_s},
                     {"latency_s", link.latency_s},
                     {"overlap", link.overlap},
                     {"flops_per_s", kernel.flops_per_s},
                     {"concurrent_ranks", kernel.concurrent_ranks},
                     {"copy_bytes_per_s", kernel.copy_bytes_per_s},
                     {"measured", o.measure}};
    for (const StrategyEstimate& e : estimates) {
      doc["strategies"].push_back({{"strategy", strategy_name(e.strategy)},
                                   {"feasible", e.feasible},
                                   {"reason", e.reason},
                                   {"flops", e.flops},
                                   {"bytes_sent", e.bytes_sent},
                                   {"messages", e.messages},
                                   {"peak_bytes", e.peak_bytes},
                                   {"compute_seconds", e.compute_seconds},
                                   {"comm_seconds", e.comm_seconds},
                                   {"copy_seconds", e.copy_seconds},
                                   {"seconds", e.seconds}});
    }
    doc["recommended"] = strategy_name(pick.strategy);
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  std::printf(
      "cpattn plan: B=%lld S=%lld Hq=%lld Hkv=%lld Dqk=%lld Dv=%lld, %s%s, %s layout, P=%d\n"
      "  models%s: link %.2f GB/s + %.1f us per message, overlap %.2f, kernel %.1f GFLOP/s per "
      "rank (%s), copies %.2f GB/s\n\n",
      static_cast<long long>(p.B), static_cast<long long>(p.S), static_cast<long long>(p.Hq),
      static_cast<long long>(p.Hkv), static_cast<long long>(p.Dqk), static_cast<long long>(p.Dv),
      p.params.causal ? "causal" : "no causal mask",
      p.doc_lengths.empty() ? ""
                            : (", " + std::to_string(p.doc_lengths.size()) + " documents").c_str(),
      o.layout.c_str(), p.cp_size, o.measure ? " (measured)" : "", link.bandwidth_bytes_per_s / 1e9,
      link.latency_s * 1e6, link.overlap, kernel.flops_per_s / 1e9,
      kernel.concurrent_ranks > 0
          ? (std::to_string(kernel.concurrent_ranks) + " ranks at full speed").c_str()
          : "each rank at this rate with all ranks running at once",
      kernel.copy_bytes_per_s / 1e9);
  std::printf(
      "| strategy | GFLOP per rank | sent per rank | messages | peak memory per rank | compute s "
      "| comm s | copies s | predicted s |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const StrategyEstimate& e : estimates) {
    if (!e.feasible) {
      std::printf("| %s | not possible: %s |||||||\n", strategy_name(e.strategy).c_str(),
                  e.reason.c_str());
      continue;
    }
    std::printf("| %s | %.2f | %s | %lld | %s | %.3f | %.3f | %.3f | %.3f |\n",
                strategy_name(e.strategy).c_str(), e.flops / 1e9, fmt_bytes(e.bytes_sent).c_str(),
                static_cast<long long>(e.messages), fmt_bytes(e.peak_bytes).c_str(),
                e.compute_seconds, e.comm_seconds, e.copy_seconds, e.seconds);
  }
  std::printf("\nrecommended: %s (predicted %.3f s per forward + backward)\n",
              strategy_name(pick.strategy).c_str(), pick.seconds);
  return 0;
}

}  // namespace

Command plan_command() {
  return {
      "plan", [](CLI::App& app) -> std::function<int()> {
        CLI::App* sub = app.add_subcommand(
            "plan",
            "Predict every CP strategy's per-rank compute, bytes sent, peak memory and time "
            "for a shape, mask and group size, and recommend the fastest (docs/strategies.md)");
        auto o = std::make_shared<PlanOptions>();
        PlanProblem& p = o->problem;
        p.S = 8192;
        p.Hq = 8;
        p.Hkv = 8;
        p.Dqk = p.Dv = 128;
        p.cp_size = 4;
        p.params.causal = true;
        const auto range = [](int64_t hi) { return CLI::Range(int64_t{1}, hi); };
        sub->add_option("--batch", p.B, "B")->check(range(1 << 20))->capture_default_str();
        sub->add_option("--seq", p.S, "S, tokens")
            ->check(range(int64_t{1} << 40))
            ->capture_default_str();
        sub->add_option("--heads-q", p.Hq, "query heads")
            ->check(range(4096))
            ->capture_default_str();
        sub->add_option("--heads-kv", p.Hkv, "key/value heads")
            ->check(range(4096))
            ->capture_default_str();
        sub->add_option("--dqk", p.Dqk, "head dim of q and k")
            ->check(range(4096))
            ->capture_default_str();
        sub->add_option("--dv", p.Dv, "head dim of v")->check(range(4096))->capture_default_str();
        sub->add_flag("--causal,!--no-causal", p.params.causal, "causal mask (default on)");
        sub->add_option("--window-left", p.params.window_left, "sliding window (-1: none)")
            ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
        sub->add_option("--window-right", p.params.window_right, "sliding window (-1: none)")
            ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
        sub->add_option("--docs", o->docs,
                        "packed documents: lengths '300,5,700,19' (summing to --seq) or "
                        "'mean:N'");
        sub->add_option("--cp", p.cp_size, "P, ranks of the group")
            ->check(CLI::Range(1, 4096))
            ->capture_default_str();
        sub->add_option("--layout", o->layout,
                        "zigzag | striped | contiguous | doc_zigzag (each --docs document "
                        "zigzagged over the ranks)")
            ->check(CLI::IsMember(layout_choices()))
            ->capture_default_str();
        sub->add_option("--bandwidth", o->bandwidth_gbs, "link GB/s per rank (1e9 B/s)")
            ->check(CLI::PositiveNumber)
            ->capture_default_str();
        sub->add_option("--latency", o->latency_us, "link latency per message, us")
            ->check(CLI::NonNegativeNumber)
            ->capture_default_str();
        sub->add_option("--overlap", o->overlap,
                        "fraction of a transfer that moves while ranks compute (1: a NIC or "
                        "progress thread; 0: copies inside wait)")
            ->check(CLI::Range(0.0, 1.0))
            ->capture_default_str();
        sub->add_option("--gflops", o->gflops, "kernel GFLOP/s per rank (forward + backward)")
            ->check(CLI::PositiveNumber)
            ->capture_default_str();
        sub->add_option("--copy", o->copy_gbs, "local copy GB/s")
            ->check(CLI::PositiveNumber)
            ->capture_default_str();
        sub->add_option("--cores", o->cores,
                        "ranks that run at full speed at once (0: all; --measure measures the "
                        "rate of P ranks running at once instead)")
            ->check(CLI::NonNegativeNumber);
        sub->add_flag("--measure", o->measure,
                      "measure the kernel, link and copy rates on this machine first (a few "
                      "seconds; in-process ranks)");
        sub->add_flag("--json", o->json, "print JSON");
        add_timeout_option(sub, o->timeout_s);
        return [o] { return run_plan(*o); };
      }};
}

}  // namespace cpattn::cli
