// Ring verification helper: shard a whole reference::Problem over P ranks, run the ring forward
// (and backward) on each, and gather the pieces back into whole-sequence reference::Outputs, so
// they can be judged like a kernel result (verify/reference_case.h). Shared by tests/cp and
// `cpattn verify --cp`.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"
#include "cpattn/layout.h"
#include "cpattn/tensor.h"
#include "verify/reference_case.h"

namespace cpattn::reference {

/// How a problem is run on the ring.
struct RingRun {
  int cp_size = 1;                            ///< P, must equal the communicator's size
  Layout layout = Layout::kContiguous;        ///< how the sequence is split over the ranks
  MemoryLayout memory = MemoryLayout::kBSHD;  ///< storage order of every rank's q/k/v/dout
  int num_threads = 1;                        ///< kernel threads per rank (CpOptions)
  bool backward = true;                       ///< also run ring backward (dq, dk, dv)
  Strategy strategy{};                        ///< how the group splits the call (strategy.h)
  bool document_aware = true;                 ///< CpOptions::document_aware
  /// When not empty (one entry per rank), rank r adds its CpStats of the call to stats[r].
  std::span<CpStats> stats{};
  Isa isa = Isa::kAuto;  ///< the kernel's code path (CpOptions::isa)
  /// dtype of every rank's q, k, v, dout (and so of out, dq, dk, dv); the problem's inputs should
  /// already be rounded to it (make_problem of a spec with that dtype) so the copy is exact.
  DType dtype = DType::kF32;
  /// When not empty (one per rank), rank r's ring borrows its buffers from workspaces[r]
  /// (CpOptions::workspace).
  std::span<AttentionWorkspace> workspaces{};
  /// A varlen problem's whole-sequence cumulative document lengths (make_varlen_problem): when
  /// not empty, every rank's q and k/v shardings are varlen_shardings(layout, cu_seqlens_q,
  /// cu_seqlens_k, ...) (layout.h) instead of the problem's positions and document ids, which
  /// they equal.
  std::vector<int64_t> cu_seqlens_q{}, cu_seqlens_k{};
};

/// Zero whole-sequence Outputs of the problem's shapes (gradients only when backward).
Outputs zero_outputs(const Dims& d, bool backward);

/// One rank's part of the ring: shards `whole` (ProblemTensors, built once and shared read-only
/// by the ranks) by run.layout (q by Sq, k/v by Sk; positions and
/// documents from the problem, identity positions left implicit, or from run.cu_seqlens_q / _k),
/// restrides it to run.memory in
/// run.dtype,
/// runs run.strategy's forward (and backward) on `comm` (detail::cp_attention_forward),
/// and writes this rank's rows of out, lse, dq, dk, dv into `all` (other rows untouched, so ranks
/// may share `all` without a lock), and rank 0 the sink gradient dsink (with sinks), after
/// checking that every rank returned the same dsink bits (one all_to_all). Throws
/// Error(kInvalidArgument) when run.cp_size != comm.size(), Error(kInternal) naming the ranks
/// when their dsink differ; ring errors propagate.
void run_ring_rank(Communicator& comm, const Problem& p, const ProblemTensors& whole,
                   const RingRun& run, Outputs& all);

/// For a communicator spanning processes (MPI): every rank calls it; each runs its part and the
/// pieces are gathered by an allreduce sum (every row is written by one rank and is 0 elsewhere,
/// including -inf lse rows; dsink is rank 0's), so every rank returns the whole Outputs.
Outputs run_ring_gathered(Communicator& comm, const Problem& p, const RingRun& run);

/// Optional decoration of each in-process rank: gets the rank's communicator and the rank's body,
/// which it must call with a (possibly wrapping) communicator, e.g. for counting or fault
/// injection.
using RankWrapper =
    std::function<void(Communicator&, const std::function<void(Communicator&)>& body)>;

/// Runs the problem on run.cp_size in-process ranks (run_ranks) and returns the gathered Outputs.
/// Rethrows the first failing rank's exception (thread_communicator.h).
Outputs run_ring(const Problem& p, const RingRun& run, const RankWrapper& wrap = {});

}  // namespace cpattn::reference
