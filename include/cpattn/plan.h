// Choosing a CP strategy (docs/strategies.md, "Choosing"): for a problem shape, mask, group
// size and a model of the machine (link bandwidth and latency, kernel throughput), the predicted
// per-rank compute, bytes moved, peak memory and time of every strategy, and the fastest one.
// The formulas are those of docs/strategies.md; `cpattn plan` prints them (and can measure the
// models on this machine first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/layout.h"
#include "cpattn/params.h"
#include "cpattn/strategy.h"

namespace cpattn {

/// One attention call to plan (self-attention: q and k/v split alike).
struct PlanProblem {
  int64_t B = 1;              ///< batch
  int64_t S = 0;              ///< tokens of the whole sequence
  int64_t Hq = 1, Hkv = 1;    ///< query and key/value heads
  int64_t Dqk = 64, Dv = 64;  ///< head dims
  /// The mask (causal, windows, slices) and dropout; sinks, softcap and ALiBi change the
  /// scores, not which pairs are computed or what travels, so no estimate depends on them.
  AttentionParams params;
  /// Packed documents, in order (their sum must be S); empty: one document.
  std::vector<int64_t> doc_lengths;
  Layout layout = Layout::kZigzag;
  int cp_size = 1;  ///< P
};

/// The links between ranks: a message of n bytes takes latency_s + n / bandwidth_bytes_per_s.
struct LinkModel {
  double bandwidth_bytes_per_s = 10e9;  ///< per rank, while every rank sends at once
  double latency_s = 10e-6;
  /// The fraction (0..1) of a posted transfer that proceeds while the ranks compute without
  /// calling the communicator: 1 for links that move data on their own (a NIC, a progress
  /// thread, MPI moved along by Communicator::progress), near 0 where the copy happens inside
  /// wait() (in-process ranks). The ring hides overlap * min(compute, transfer) of its
  /// transfers under compute.
  double overlap = 1.0;
};

/// The compute of one rank.
struct KernelModel {
  /// Attention kernel throughput of one rank in FLOP/s, counting 7 * (Dqk + Dv) FLOPs per
  /// visible (query, key) pair and query head for forward + backward (forward 2 (Dqk + Dv),
  /// backward 2.5x that: the FLOP count of docs/performance.md).
  double flops_per_s = 20e9;
  /// Ranks that run at full speed at once (cores of a host running in-process ranks); 0: all.
  /// With P > concurrent_ranks every rank runs at concurrent_ranks / P of flops_per_s.
  int concurrent_ranks = 0;
  /// Local copies (packing the all-to-alls and the ring's relay), bytes per second.
  double copy_bytes_per_s = 4e9;
};

/// The prediction for one strategy, per rank, for one forward + backward. "Busiest" rank: the
/// one with the most work (the ring and allgather keep the caller's query split; causal masks
/// on a contiguous layout load the last rank most).
struct StrategyEstimate {
  Strategy strategy;
  bool feasible = true;
  std::string reason;     ///< why not, when !feasible (check_strategy's message)
  double flops = 0;       ///< busiest rank's kernel FLOPs (forward + backward)
  double bytes_sent = 0;  ///< busiest rank's bytes sent (forward + backward)
  int64_t messages = 0;   ///< messages sent per rank (forward + backward)
  /// The largest over the ranks of the live bytes cpattn allocates in the call (forward +
  /// backward, the forward's out and lse held through the backward; without a workspace), to the
  /// byte: what the rank's MemoryCounter measures beyond the caller's q, k, v and dout.
  double peak_bytes = 0;
  double compute_seconds = 0;  ///< flops / effective kernel throughput
  double comm_seconds = 0;     ///< bytes / bandwidth + messages * latency
  double copy_seconds = 0;     ///< packing, unpacking, merging
  /// Predicted wall time: the ring overlaps its transfers with compute as far as the link
  /// does (compute + transfer - overlap * min of the two), the all-to-all strategies do not
  /// (sum); copies add.
  double seconds = 0;
};

/// Link and kernel models measured on the machine a group runs on (measure_models).
struct MachineModel {
  LinkModel link;
  KernelModel kernel;
};

/// Measures the models on `comm`'s group (collective). Every rank at once times one rank's
/// kernel forward + backward (1 thread, best of 3) on the problem's heads, dims and mask at
/// min(S, 2048) tokens: flops_per_s (by the planner's FLOP count) is the slowest rank's, so it
/// already includes the ranks' sharing of cores (concurrent_ranks = 0). Then every rank sends
/// 16 MiB round the ring 4 times (bandwidth: bytes over the slowest rank's time, less latency)
/// and empty messages 64 times (latency); overlap: every rank posts one such 16 MiB exchange,
/// computes (spins) for twice its transfer time, calling Communicator::progress every
/// millisecond as the kernel does between its work items, then waits,
/// and 1 - (the slowest rank's wait) / (transfer time) is the fraction that moved meanwhile;
/// copy_bytes_per_s is the slowest rank's 64 MiB memcpy.
/// Every rank returns the same models. Throws the communicator's errors.
MachineModel measure_models(Communicator& comm, const PlanProblem& problem);

/// The strategies a group of P ranks can use, in this order: ring, allgather, ulysses, and every
/// grid hybrid:UxR with U, R > 1 and U * R = P (hybrid:1xP is the ring, hybrid:Px1 ulysses).
std::vector<Strategy> candidate_strategies(int cp_size);

/// The estimate of every candidate strategy (infeasible ones flagged, with their reason).
/// Uses MaskRule (mask.h) for the visible pairs of every rank and the ring's document-aware relay
/// for its traffic, so masks and documents shape both. Throws Error(kInvalidArgument) for an
/// invalid problem (S < 0, P < 1, doc_lengths not summing to S, bad params, dims < 1) or model
/// (a rate outside [1, 1e30] per second, a latency outside [0, 1e30] s, an overlap outside
/// [0, 1]).
std::vector<StrategyEstimate> plan_strategies(const PlanProblem& problem, const LinkModel& link,
                                              const KernelModel& kernel);

/// The feasible estimate with the smallest predicted time (ties: the earlier one). Throws
/// Error(kInvalidArgument) when none is feasible.
const StrategyEstimate& recommend(const std::vector<StrategyEstimate>& estimates);

}  // namespace cpattn
