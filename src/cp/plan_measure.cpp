// measure_models (plan.h): the planner's link and kernel models, measured on a group.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cpattn/kernel.h"
#include "cpattn/plan.h"
#include "cpattn/stopwatch.h"

namespace cpattn {

namespace {

// Forward + backward of one rank's kernel on the problem's shape at min(S, 2048) tokens with
// 1 thread, best of 3 (the host's noise only slows a run down): FLOP/s by the planner's count.
double kernel_flops(const PlanProblem& p, MemoryCounter* mem) {
  PlanProblem small = p;
  small.S = std::min<int64_t>(p.S, 2048);
  small.cp_size = 1;
  small.doc_lengths.clear();
  const int64_t S = small.S;
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor q({p.B, S, p.Hq, p.Dqk}, mem), k({p.B, S, p.Hkv, p.Dqk}, mem),
      v({p.B, S, p.Hkv, p.Dv}, mem), dout({p.B, S, p.Hq, p.Dv}, mem);
  for (Tensor* t : {&q, &k, &v, &dout})
    for (float& x : t->span()) x = normal(gen);
  std::vector<int64_t> pos(static_cast<size_t>(S));
  std::iota(pos.begin(), pos.end(), int64_t{0});
  const AttentionInputs in{q.view(), k.view(), v.view(), pos, pos, {}, {}};
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const Stopwatch watch;
    const KernelForwardResult f = attention_kernel_forward(in, p.params, {1, 0});
    const AttentionGradients g =
        attention_kernel_backward(in, p.params, {1, 0}, dout.view(), f.out.view(), f.lse.span());
    best = std::min(best, watch.seconds());
  }
  return plan_strategies(small, {}, {})[0].flops / best;
}

// The slowest rank's value (every rank passes its own).
double slowest(Communicator& comm, double mine) {
  std::vector<double> all(static_cast<size_t>(comm.size()), 0.0);
  all[static_cast<size_t>(comm.rank())] = mine;
  comm.allreduce_sum(std::span<double>(all));
  return *std::max_element(all.begin(), all.end());
}

// `rounds` ring exchanges of `bytes` per rank, each posted, then `spin_s` of computing (a spin
// that calls Communicator::progress every kWorkItem, as the kernel does between its work items),
// then waited for: the slowest rank's seconds in all and in the waits.
struct ExchangeTimes {
  double total = 0, waited = 0;
};
ExchangeTimes ring_exchanges(Communicator& comm, size_t bytes, int rounds, double spin_s) {
  const int n = comm.size(), r = comm.rank();
  const int64_t floats = static_cast<int64_t>(bytes / sizeof(float));
  const Tensor out({floats}, &comm.memory());
  Tensor in({floats}, &comm.memory());
  comm.barrier();
  const Stopwatch watch;
  double waited = 0;
  for (int s = 0; s < rounds; ++s) {
    Request recv = comm.irecv(in.span(), (r + n - 1) % n, s);
    Request send = comm.isend(out.span(), (r + 1) % n, s);
    constexpr double kWorkItem = 1e-3;  // seconds: a kernel work item at the planner's shapes
    const Stopwatch busy;
    volatile double sink = 0;
    for (double next = kWorkItem; busy.seconds() < spin_s; next += kWorkItem) {
      while (busy.seconds() < std::min(next, spin_s)) sink = sink + 1.0;
      comm.progress();
    }
    const Stopwatch wait;
    recv.wait();
    send.wait();
    waited += wait.seconds();
  }
  const double total = watch.seconds();
  return {slowest(comm, total), slowest(comm, waited)};
}

}  // namespace

MachineModel measure_models(Communicator& comm, const PlanProblem& problem) {
  MachineModel m;
  comm.barrier();
  // The slowest rank's rate: the smallest, as the largest of the negatives.
  m.kernel.flops_per_s = -slowest(comm, -kernel_flops(problem, &comm.memory()));
  m.kernel.concurrent_ranks = 0;
  if (comm.size() > 1) {
    constexpr size_t kBytes = size_t{16} << 20;
    constexpr int kRounds = 4, kPings = 64;
    m.link.latency_s = ring_exchanges(comm, 0, kPings, 0).total / kPings;
    m.link.bandwidth_bytes_per_s =
        static_cast<double>(kBytes) * kRounds /
        std::max(ring_exchanges(comm, kBytes, kRounds, 0).total - kRounds * m.link.latency_s, 1e-9);
    // The share of one exchange that did not wait while the ranks computed for twice its time.
    const double transfer = static_cast<double>(kBytes) / m.link.bandwidth_bytes_per_s;
    m.link.overlap =
        std::clamp(1.0 - ring_exchanges(comm, kBytes, 1, 2 * transfer).waited / transfer, 0.0, 1.0);
  }
  const Tensor a({int64_t{16} << 20}, &comm.memory());
  Tensor b({int64_t{16} << 20}, &comm.memory());
  const Stopwatch watch;
  std::memcpy(b.data(), a.data(), static_cast<size_t>(a.numel()) * sizeof(float));
  double copy = static_cast<double>(a.numel()) * sizeof(float) / std::max(watch.seconds(), 1e-9);
  copy = slowest(comm, -copy);  // the smallest rate: max of the negatives
  m.kernel.copy_bytes_per_s = -copy;
  return m;
}

}  // namespace cpattn
