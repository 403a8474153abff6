// `cpattn verify --cp P ...`: the ring over P ranks (in-process, or the MPI world) against the
// float64 reference and against the single-rank kernel, judged by the kernel's tolerance rule.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/verify.h"
#include "cpattn/communicator.h"
#include "cpattn/layout.h"
#include "cpattn/strategy.h"
#include "verify/reference.h"

namespace cpattn::cli {

/// The attention problem of a ring case (self-attention, positions 0..S-1).
struct RingShape {
  reference::Dims dims{1, 197, 197, 8, 2, 64, 64};  ///< S = Sq (Sk is set equal to it)
  bool causal = false;
  int64_t window_left = -1;  ///< -1: unbounded (kernel.h)
  int64_t window_right = -1;
  float dropout_p = 0.0f;
  bool docs = false;  ///< packed documents (reference::document_of)
  uint64_t seed = 1;  ///< inputs and the dropout RngState derive from it
  /// q, k, v, dout and results (cpattn/dtype.h); bf16 / fp16 run on the ring strategy only
  DType dtype = DType::kF32;
  /// sinks, softcap, ALiBi, slices (on the positions 0..S-1, with causal, window and docs)
  CaseFeatures features;
  /// The document lengths of a varlen call (cpattn/varlen.h; self-attention, cu_seqlens_q =
  /// cu_seqlens_k, zeros allowed), whose sum is dims.Sq; empty: not a varlen case.
  std::vector<int64_t> varlen;
};

/// One line of the ring sweep: a shape split over cp_size ranks by layout, with a strategy.
struct RingCase {
  RingShape shape;
  Layout layout = Layout::kZigzag;
  int cp_size = 1;
  Strategy strategy{};
};

/// Readable unique name, e.g. "Causal_GQA8x2_S197_D64x64_p0p1_W37x5_zigzag_cp4" (window part
/// only when a window is set; "_sink", "_cap30", "_alibi", "_slices2" (their number) before the
/// layout when the features are on; "_ulysses", "_hybrid_2x2" after it for strategies other
/// than the ring; "Varlen6_" before it all for a varlen case of 6 documents). Only letters,
/// digits and '_'.
std::string ring_case_name(const RingCase& c);

/// The random problem of a shape: reference::make_problem (inputs ~ N(0, 1) rounded to float,
/// documents when shape.docs, the features (add_features); reference::make_varlen_problem for a
/// varlen shape) with the shape's causal flag, window and dropout.
reference::Problem make_ring_problem(const RingShape& shape);

/// The default `verify --cp P` sweep of one strategy: the default RingShape, causal and not,
/// dropout 0 and 0.1, over `layouts` (3 layouts: 12 cases, a few seconds).
std::vector<RingCase> default_ring_cases(int cp_size, const std::vector<Layout>& layouts,
                                         const Strategy& strategy = {});

/// The strategies `verify --cp P` sweeps without --strategy: ring, allgather, ulysses (when Hq
/// and Hkv allow it, check_strategy) and every proper grid hybrid:UxR (U, R > 1, U * R = P); for
/// bf16 / fp16 the ring only (check_strategy_dtype).
std::vector<Strategy> sweep_strategies(int cp_size, int64_t Hq, int64_t Hkv,
                                       DType dtype = DType::kF32);

/// Runs one case and judges it; returns two rows (three for a varlen case without dropout):
///   "<name>":           ring vs the float64 reference under the kernel's rule (reference_case.h);
///   "<name>_vs_kernel": max |ring - single-rank kernel| per tensor, held to the same tolerances
///                       (splitting the sequence must not move the result further from the
///                       kernel's than the rule allows either of them to be from the exact one);
///   "<name>_vs_documents": max |ring - each document run alone through the kernel| (flash-attn's
///                       own semantics of the call; reference::run_kernel_per_document), held to
///                       the same tolerances. A varlen case runs on the shardings of
///                       varlen_shardings (layout.h).
/// With sinks, dsink is judged in the first two rows when the CP run returns it
/// (VerifyResult::dsink).
/// `world` null: cp_size in-process ranks (ThreadCommunicator), each kernel call using
/// kernel_threads. Otherwise every rank of `world` (size == cp_size) must call it; the ring runs
/// one rank per process, the references run on rank 0 only and other ranks return no rows.
/// `timeout` bounds every wait of the in-process ranks (world's own deadline applies otherwise).
/// Throws Error(kInvalidArgument) on a bad case (e.g. cp_size < 1 or != world->size()).
std::vector<VerifyResult> verify_ring_case(const RingCase& c, Communicator* world,
                                           int kernel_threads, std::chrono::milliseconds timeout);

}  // namespace cpattn::cli
