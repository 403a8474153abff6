// The forward driver (FlashAttention-2, Dao 2023, Alg. 1): cuts q and k into tiles, orders the
// work items and carves each worker's scratch; the items themselves run in the ISA copy the call
// resolved (isa/forward.cpp).
#include "kernel/forward.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "cpattn/tensor.h"
#include "kernel/parallel.h"
#include "kernel/scratch.h"
#include "kernel/tile_plan.h"
#include "kernel/tiles.h"

namespace cpattn::detail {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Per-worker scratch, one counted Tensor each (floats; nr = the ISA's panel width):
//   kr [kTileK][Dqk]            K rows of the current k tile
//   vp [Dv_pad/nr][kTileK][nr]  V panels of the current k tile
//   st [kTileK][kScoreStride]   S^T scores, then probabilities (kForwardScoreStride)
//   al [kTileQ]                 per-query rescale factors exp(m_old - m_new)
//   q_rel [kTileQ], k_rel [kTileK]  ALiBi: positions of a tile pair as floats (isa/scores.h)
//   per lane (q tile, head) of the item (lane_stride apart): qt [kTileQ/nr][Dqk][nr] Q^T panels,
//     o [kTileQ][Dv_pad] accumulator, m [kTileQ] running max, l [kTileQ] running sum
ForwardOffsets plan_scratch(const ForwardProblem& p, int64_t dv_pad, int64_t lanes,
                            ScratchLayout& item) {
  ForwardOffsets at{};
  ScratchLayout lane;
  at.qt = lane.add(kForwardTileQ * p.Dqk);
  at.o = lane.add(kForwardTileQ * dv_pad);
  at.m = lane.add(kForwardTileQ);
  at.l = lane.add(kForwardTileQ);
  at.lane_stride = lane.total();
  at.kr = item.add(kForwardTileK * p.Dqk);
  at.vp = item.add(kForwardTileK * dv_pad);
  at.st = item.add(kForwardTileK * kForwardScoreStride);
  at.alpha = item.add(kForwardTileQ);
  at.q_rel = item.add(kForwardTileQ);
  at.k_rel = item.add(kForwardTileK);
  at.lanes = item.add(lanes * at.lane_stride);
  return at;
}

}  // namespace

void run_forward(const ForwardProblem& p) {
  if (p.B == 0 || p.Hq == 0 || p.Sq == 0) return;
  const IsaKernels isa = isa_kernels(p.isa);
  const std::vector<TileRange> q_tiles = make_tiles(p.q_pos, p.q_doc, kForwardTileQ);
  const std::vector<TileRange> k_tiles = make_tiles(p.k_pos, p.k_doc, kForwardTileK);
  const TileMask mask(p, q_tiles);
  // Dynamic scheduling hands out items in index order; putting the q tiles that see the most
  // k tiles first (longest job first) balances causal and windowed work across threads.
  std::vector<int64_t> cost(q_tiles.size(), 0);
  for (size_t i = 0; i < q_tiles.size(); ++i) {
    for (const TileRange& kt : k_tiles) {
      cost[i] += mask.classify(q_tiles[i], kt) != BlockVisibility::kHidden;
    }
  }
  std::vector<size_t> q_order(q_tiles.size());
  std::iota(q_order.begin(), q_order.end(), size_t{0});
  std::stable_sort(q_order.begin(), q_order.end(),
                   [&](size_t a, size_t b) { return cost[a] > cost[b]; });

  ForwardPlan plan{};
  plan.p = &p;
  plan.mask = &mask;
  plan.q_tiles = q_tiles.data();
  plan.k_tiles = k_tiles.data();
  plan.n_k_tiles = static_cast<int64_t>(k_tiles.size());
  plan.q_order = q_order.data();
  plan.n_q_tiles = static_cast<int64_t>(q_tiles.size());
  plan.heads_per_item = std::min(p.group, kForwardMaxHeadsPerItem);
  plan.head_chunks = (p.group + plan.heads_per_item - 1) / plan.heads_per_item;
  // As many q tiles per item as the lanes allow, but never so few items that a thread idles
  // (two items per thread at least, when the call has them).
  const int64_t other_items = p.B * p.Hkv * plan.head_chunks;
  plan.tiles_per_item = std::max<int64_t>(1, kForwardMaxLanesPerItem / plan.heads_per_item);
  while (plan.tiles_per_item > 1 &&
         (plan.n_q_tiles + plan.tiles_per_item - 1) / plan.tiles_per_item * other_items <
             2 * p.num_threads) {
    --plan.tiles_per_item;
  }
  plan.q_runs = (plan.n_q_tiles + plan.tiles_per_item - 1) / plan.tiles_per_item;
  plan.dv_pad = round_up(p.Dv, isa.nr);
  ScratchLayout layout;
  plan.at = plan_scratch(p, plan.dv_pad, plan.tiles_per_item * plan.heads_per_item, layout);

  const int64_t items = plan.q_runs * other_items;
  std::vector<Tensor> scratch(static_cast<size_t>(worker_count(items, p.num_threads)));
  parallel_for(items, p.num_threads, p.interruption_point, [&](int64_t item, int worker) {
    Tensor& buf = scratch[static_cast<size_t>(worker)];
    if (buf.numel() == 0) buf = Tensor({layout.total()});
    isa.forward_item(plan, item, buf.data());
  });
}

}  // namespace cpattn::detail
