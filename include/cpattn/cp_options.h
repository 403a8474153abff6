// The options and statistics of a CP attention call (every strategy, both tiers).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "cpattn/isa.h"
#include "cpattn/strategy.h"
#include "cpattn/workspace.h"

namespace cpattn {

/// Where one call's time went on this rank (filled when CpOptions::stats is set), for every CP
/// strategy (strategy.h).
struct CpStats {
  double kernel_seconds = 0;  ///< inside attention kernel calls
  double comm_seconds = 0;    ///< inside isend/irecv/wait (blocked or copying: not hidden)
  double other_seconds = 0;   ///< packing, merging, delta, gradient sums
  int64_t messages_sent = 0;
  int64_t bytes_sent = 0;
  /// What the plain ring (every k/v block visits every rank, every dk/dv accumulator goes all the
  /// way round) sends for the ring steps of this call; bytes_sent / bytes_sent_plain_ring is the
  /// document-aware ring's share (CpOptions::document_aware). 0 for strategies without a ring.
  int64_t bytes_sent_plain_ring = 0;
  int64_t blocks_computed = 0;  ///< kernel calls
  int64_t blocks_skipped = 0;   ///< blocks the masks hide entirely (or empty ones)
};

/// The options of a CP attention call, for every strategy and both tiers (the safe API of
/// attention.h and recompute.h, and the building blocks of cpattn/detail/cp.h). Only `strategy`
/// changes the math (the rounding of partial sums); results are bitwise the same for any value of
/// document_aware, num_threads of in-process ranks aside, and with or without a workspace.
struct CpOptions {
  /// How the group splits the call (strategy.h): the ring by default.
  Strategy strategy{};
  /// Where the call comes from, in the caller's words: a layer index, a module path
  /// ("model.layers.3.attn"). Empty (the default): the source location of the attention_forward /
  /// attention_backward / recompute_* call, "file.cpp:123" (file name without its directory, so
  /// builds of one source in other directories agree). The call agreement compares it, so a rank
  /// that skipped a call fails at the call that follows, on every rank, naming both sites
  /// (docs/design.md section 6). Not read by the detail tier.
  std::string call_site;
  /// Kernel threads per rank (>= 1). In-process ranks (ThreadCommunicator) pass 1.
  int num_threads = 1;
  /// When non-null, the call adds its timings and counts here (caller-owned, per rank).
  CpStats* stats = nullptr;
  /// Document-aware routing (docs/strategies.md, "Document-aware ring"): from the position and
  /// document ranges of every rank's block and of its runs of consecutive positions
  /// (MaskRule::classify, the ring's block skip), a k/v block
  /// travels round the ring only as far as the last rank that needs it, and its dk/dv
  /// accumulator returns from there straight to its home rank; a block that at most two other
  /// ranks need, with a rank on the way that does not, goes straight from its home to them, and
  /// their dk/dv shares come straight back and are added at home in ring order. Saves traffic
  /// with packed documents, mask slices, windows and causal masks on contiguous layouts, and with
  /// documents and slices on zigzag ones. false: the plain ring.
  bool document_aware = true;
  /// Whether this forward's ForwardResult may go to attention_backward or serve a recompute
  /// (attention_forward reads it; backward and recompute ignore it). false, for a forward whose
  /// state nobody differentiates (inference; PyTorch's no-grad mode): its fingerprint leaves q, k
  /// and v undigested (inputs_digest = kInputsNotDigested), which saves a pass over them (about
  /// 1 % of an S 4096 forward on 2 threads, docs/performance.md); a backward or recompute given
  /// that state refuses it (kStateMismatch / kRecomputeDiverged, naming this option). out and lse
  /// are bitwise the same either way; the call agreement does not compare it.
  bool for_backward = true;
  /// How a backward returns AttentionGradients::dsink (calls with sinks): true, the sum over the
  /// group's rows, the same bits on every rank (one allreduce_sum in rank order); false, each
  /// rank's own share (its rows; under Ulysses its heads), without the allreduce: the ranks'
  /// shares sum to the total. false is for frameworks that sum every parameter's gradient over
  /// the CP group themselves (PyTorch training loops under context parallelism; the Python
  /// package passes false), which would count a reduced dsink P times. The call agreement
  /// compares it (ranks that differ would not all make the allreduce).
  bool reduce_dsink = true;
  /// The kernel's code path for every block (KernelOptions::isa; resolved once per call).
  Isa isa = Isa::kAuto;
  /// Buffers to borrow instead of allocating (AttentionWorkspace; caller-owned, one call at a
  /// time), for every strategy. null: each call allocates its own.
  AttentionWorkspace* workspace = nullptr;
  /// A stop request of the caller's (a flag its signal handler sets; caller-owned, outlives the
  /// call): once it is true, the call throws Error(kInterrupted) at its next interruption point
  /// (before each kernel work item and ring step), so a long call stops within one tile. The
  /// call's outputs are then unspecified; its inputs and every ForwardResult are untouched.
  /// null: no stop request.
  const std::atomic<bool>* stop_requested = nullptr;
};

/// Throws Error(kInterrupted) "stopped by request" when options.stop_requested is set and true;
/// the check of the calls' interruption points, for callers that want the same check between
/// their own pieces of work.
void throw_if_stop_requested(const CpOptions& options);

}  // namespace cpattn
