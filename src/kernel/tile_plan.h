// The work plans of a forward and a backward call: what the drivers (forward.cpp, backward.cpp,
// compiled once) decide and the per-ISA work-item code (isa/forward.cpp, isa/backward.cpp)
// follows, and the table of one ISA copy's entry points (IsaKernels). Plain data only: the ISA
// copies read it without calling any inline function of the baseline code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpattn/isa.h"
#include "kernel/problem.h"
#include "kernel/tiles.h"

namespace cpattn::detail {

/// Tile sizes (chosen by measurement, docs/performance.md), the same for every ISA so that work
/// items, tile order and online-softmax rescales, and hence the bits of every result, do not
/// depend on the vector width. Every size is a multiple of each ISA's panel width (8, 16, 32).
/// Forward: the k loop's S^T product has the keys as rows (128) and the queries as columns (192
/// = 6..24 panels), so each packed Q^T panel is reused from L1 by every key row block. Each K/V
/// tile is read from L3/DRAM once per q tile, so the q tile is as tall as L2 allows: 192 rows
/// measured 20-25 % faster than 96 at Hkv = Hq. A k tile of 128 keys amortises the per-query
/// bookkeeping (max, rescale of O) over 128 keys.
constexpr int64_t kForwardTileQ = 192;
constexpr int64_t kForwardTileK = 128;
/// The row stride (floats) of the forward's S^T scratch, [kForwardTileK keys][queries]: 16 more
/// than the q tile, so that the P V product's broadcasts down a query's column (one float per key
/// row) spread over every L1 set; 192 floats (12 cache lines) put all 128 rows in 16 of 64 sets.
/// 208 measured 1.002-1.01x faster on Zen 2 than 192 (and than 200, 216, 240); the same bits.
constexpr int64_t kForwardScoreStride = kForwardTileQ + 16;
/// Query heads of one kv group handled by one forward work item (they share each packed K/V tile).
constexpr int64_t kForwardMaxHeadsPerItem = 4;
/// (q tile, q head) pairs of one forward work item, its "lanes": every lane shares each packed K/V
/// tile, so an item of one head takes up to 8 q tiles (consecutive in q_order) and reads and packs
/// each K/V tile once for all of them; with Hkv = Hq every K/V tile was otherwise read from memory
/// once per 192 queries (docs/performance.md, "Intel Xeon"). Each lane runs exactly the steps it
/// would run alone (same k tiles, same order), so the grouping changes no bit of any result.
/// Lane state (Q^T panels, O, m, l: ~194 KiB at D = 128) x 8 and the shared tiles (K rows, V
/// panels, S^T: ~233 KiB) take 1.8 MiB, which fits a 2 MiB L2 (12 lanes measured about 1 % faster
/// on Zen 2, whose 512 KiB L2 holds neither; docs/performance.md).
constexpr int64_t kForwardMaxLanesPerItem = 8;
/// Backward: five products per (q tile, k tile) pair of 96 queries x 64 keys; the pair's
/// score-shaped operands (S^T, dP^T/dS^T, Z P: 24 KiB each) and packed tiles (Q, dO: 48 KiB each,
/// K, V: 32 KiB each at D = 128) stay in L2. The two products that sum over the q tile's rows
/// (dV += (Z P)^T dO, dK += dS^T Q) run 96-step chains per load and store of their accumulators,
/// and dQ's 96 rows are whole register blocks on every ISA (kMr 6 and 8): 96 queries measured
/// 1.04-1.05x faster than 64 on Zen 2 (S = 4096, full mask; docs/performance.md). The q tile's
/// height changes no bit of any result (up to the sign of a zero): each dK, dV element is one FMA
/// chain over its queries in order and each dQ element one over its keys, whatever the tiles.
constexpr int64_t kBackwardTileQ = 96;
constexpr int64_t kBackwardTileK = 64;
/// Consecutive q tiles of one head that a backward work item runs together, its "lanes": each
/// k tile (and its dk/dv accumulators) is packed and brought into cache once for all of them
/// rather than once per q tile. Every lane runs exactly the pairs it would run alone, and each
/// k tile meets the lanes in q tile order, the order in which it meets the q tiles run one at a
/// time, so the lanes change no bit of any result; the masks still see 96-row q tiles (a causal
/// diagonal wastes no more). Lane state: packed Q, dO and dQ, 240 KiB at D = 128. On Zen 2
/// (512 KiB L2), S = 4096, BSHD, with 64-row tiles: 4 lanes 1.06-1.36x faster than 1, 2 lanes
/// about 1.1x, 8 no faster than 4; with 96-row tiles 3 lanes no faster than 4
/// (docs/performance.md).
constexpr int64_t kBackwardMaxLanes = 4;

/// Offsets (floats) of the arrays of a forward worker's scratch buffer (ScratchLayout).
struct ForwardOffsets {
  int64_t kr, vp, st, alpha, q_rel, k_rel, lanes;  ///< in the worker's buffer
  int64_t qt, o, m, l, lane_stride;  ///< in one lane's block (lanes + lane * lane_stride)
};

/// A forward call's work: items (a run of <= tiles_per_item q tiles of q_order, batch, kv head,
/// chunk of <= heads_per_item q heads), item index = ((q run * B + b) * Hkv + g) * head_chunks +
/// chunk; q run r holds q_order[r * tiles_per_item ...]. An item's lanes (tile, head) number
/// tiles_per_item * heads_per_item <= kForwardMaxLanesPerItem.
struct ForwardPlan {
  const ForwardProblem* p;
  const TileMask* mask;
  const TileRange* q_tiles;
  const TileRange* k_tiles;
  int64_t n_k_tiles;
  const size_t* q_order;  ///< q tiles, longest job first
  int64_t n_q_tiles;
  int64_t tiles_per_item, q_runs;
  int64_t heads_per_item, head_chunks;
  int64_t dv_pad;  ///< Dv rounded up to the ISA's panel width
  ForwardOffsets at;
};

/// Offsets (floats) of the arrays of a backward worker's scratch buffer (sizes in
/// isa/backward.cpp).
struct BackwardOffsets {
  int64_t kr, kp, vr, st, dst, pzt, dcap, q_rel, k_rel, dk, dv, lanes;  ///< in the worker's buffer
  int64_t qt, ot, qp, op, dq, lse_safe, dd, lane_stride;                ///< in one lane's block
};

/// A backward call's work: items (batch, kv head, k-tile chunk), item index = (b * Hkv + g) *
/// chunks + chunk; chunk c owns k tiles c, c + chunks, ... An item runs each of its heads' q
/// tiles in runs of `lanes` consecutive tiles (kBackwardMaxLanes).
struct BackwardPlan {
  const BackwardProblem* p;
  const TileMask* mask;
  const TileRange* q_tiles;
  int64_t n_q_tiles;
  int64_t lanes;  ///< q tiles run together: min(kBackwardMaxLanes, n_q_tiles), at least 1
  const TileRange* k_tiles;
  int64_t n_k_tiles;
  int64_t chunks, tiles_per_chunk;
  int64_t dqk_pad, dv_pad;  ///< head dims rounded up to the ISA's panel width
  const float* delta;       ///< D_i, [B, Hq, Sq]
  /// Chunk 0 writes its dq contributions straight to dq (an fp32 dq: the driver adds the other
  /// chunks' to it, one rounding each); otherwise every chunk has partial rows.
  bool chunk0_writes_dq;
  /// [chunks - chunk0_writes_dq][B][Hq][Sq][dqk_pad], the partial rows of chunks
  /// chunk0_writes_dq, ..., chunks - 1, when chunks > 1; else null.
  float* dq_partial;
  BackwardOffsets at;
  void* hook_state;  ///< the driver's once-only caller of BackwardOptions::before_dkdv
};

/// Called by backward work items before their first dk/dv write (backward.cpp): runs
/// BackwardOptions::before_dkdv once per call, the other workers waiting until it returned.
void before_dkdv_write(const BackwardPlan& plan);

/// The entry points of one per-ISA copy of src/kernel/isa/ (namespace cpattn::detail::<isa>).
struct IsaKernels {
  Isa isa;
  int64_t nr;  ///< column panel width of packed operands (2 vectors): drivers pad scratch to it
  void (*forward_item)(const ForwardPlan& plan, int64_t item, float* scratch);
  void (*backward_item)(const BackwardPlan& plan, int64_t item, float* scratch);
  /// D_i = <dout_i, out_i> of rows begin .. begin + rows - 1 of (b, h) into d.
  void (*row_dots)(const ConstView& dout, const ConstView& out, int64_t b, int64_t h, int64_t begin,
                   int64_t rows, float* d);
  /// The kernel's exp over x[0 .. n) (n a multiple of 16), in blocks of 8 vectors through exp_v
  /// of an array and the rest one vector at a time: the exp test checks every copy.
  void (*exp)(const float* x, float* y, int64_t n);
  /// The same with the promise that every x is <= 0, -inf or NaN (exp_v<ExpInputs::kNonPositive>,
  /// the backward softmax's): the exp test checks that it gives exp's bits there.
  void (*exp_nonpositive)(const float* x, float* y, int64_t n);
  /// The forward softmax's 2^x (exp2_v) over x[0 .. n) (n a multiple of 16, every x <= 0, -inf
  /// or NaN), in blocks as exp: the exp test checks every copy.
  void (*exp2)(const float* x, float* y, int64_t n);
  /// The kernel's tanh (softcap) over x[0 .. n) (n a multiple of 16): the tanh test checks it.
  void (*tanh)(const float* x, float* y, int64_t n);
  /// The packers' fp16 widening, dst[i] = mul * x[i] for i < n (isa/pack.h: widen_fp16_row): the
  /// fp16 widening test checks every copy against fp16_to_float.
  void (*widen_fp16_row)(const uint16_t* src, int64_t n, float mul, float* dst);
  /// vdpbf16ps / vfmadd231ps instruction throughput on this core (isa/dot_rate.h); 0 in copies
  /// without AVX512_BF16.
  double (*bf16_dot_vs_fma_rate)();
};

/// The copy that runs `isa` (resolved: not kAuto; available: resolve_isa checked it).
IsaKernels isa_kernels(Isa isa);

}  // namespace cpattn::detail
