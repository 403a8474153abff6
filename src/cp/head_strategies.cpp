// The Ulysses and hybrid strategies: an all-to-all inside a group of ranks moves q/k/v from
// sequence shards to head shards (each rank: a slice of the heads over all of the group's tokens,
// in global token order), the attention of those heads runs there (Ulysses: one kernel call over
// the whole sequence; hybrid: the ring across the rows of the grid), and a second all-to-all
// brings the results back to the caller's sharding. With sinks, each rank's partial sink gradient
// (its heads, its rows) is summed over the whole group by one allreduce.
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cp/ring_core.h"
#include "cp/strategy_detail.h"
#include "cp/transpose.h"
#include "cpattn/error.h"

namespace cpattn::detail {

namespace {

// The group a rank moves heads in: the communicator, its members' cp ranks (member m of the
// group is cp rank members[m]) and the head assignment.
struct HeadGroup {
  Communicator& comm;
  std::vector<int> members;
  HeadSplit split;
};

// What a rank holds on the head side: its query heads over the group's q tokens and the kv heads
// they use over the group's k/v tokens.
struct HeadSide {
  TokenUnion qu, ku;
  HeadRange qh, kvh;
};

HeadSide head_side(const CpCall& c, const HeadGroup& g) {
  const int r = g.comm.rank();
  return {token_union(c.q_seq, g.members), token_union(c.kv_seq, g.members), g.split.q(r),
          g.split.kv(r)};
}

// Computes the attention of the head side's heads: out [B, Sq_u, Hq_l, Dv], lse [B, Hq_l, Sq_u];
// a ring inside borrows its buffers through the call's lease.
using ForwardCompute = std::function<void(const HeadSide&, ConstView q, ConstView k, ConstView v,
                                          View out, std::span<float> lse, WorkspaceLease& lease)>;
// Its backward, given dout, lse and delta = D_i of the head side, into dq, dk, dv, and with
// sinks the partial sink gradient of the head side's rows and heads into dsink (fp32 [Hq of the
// call], other heads untouched; empty without sinks).
using BackwardCompute =
    std::function<void(const HeadSide&, ConstView q, ConstView k, ConstView v, ConstView dout,
                       std::span<const float> lse, std::span<const float> delta, View dq, View dk,
                       View dv, std::span<float> dsink, WorkspaceLease& lease)>;

using WB = WorkspaceBuffer;

detail::CpForwardResult heads_forward(const CpCall& c, const HeadGroup& g,
                                      const ForwardCompute& compute) {
  const CpDims& d = c.d;
  const int r = g.comm.rank(), n = g.comm.size();
  MemoryCounter* mem = &c.comm.memory();
  WorkspaceLease lease(c.options.workspace, mem);
  CpChannel ch(g.comm, c.options.stats);
  const HeadSide h = head_side(c, g);
  const int64_t sq = h.qu.length();
  const View out_h = lease.view(WB::kOut, {d.B, sq, h.qh.count, d.Dv});
  const std::span<float> lse_h = lease.get(WB::kLse, d.B * h.qh.count * sq);
  {
    const View q_h = lease.view(WB::kQ, {d.B, sq, h.qh.count, d.Dqk});
    const View k_h = lease.view(WB::kK, {d.B, h.ku.length(), h.kvh.count, d.Dqk});
    const View v_h = lease.view(WB::kV, {d.B, h.ku.length(), h.kvh.count, d.Dv});
    const std::vector<HeadRange> qa = g.split.q_all(), kva = g.split.kv_all();
    const HeadPart in[] = {
        {&h.qu, qa, c.q, q_h, false}, {&h.ku, kva, c.k, k_h, false}, {&h.ku, kva, c.v, v_h, false}};
    to_heads(ch, lease, r, n, 0, in);
    compute(h, q_h, k_h, v_h, out_h, lse_h, lease);
    lease.done({WB::kQ, WB::kK, WB::kV});
  }
  detail::CpForwardResult res{Tensor({d.B, d.Sq, d.Hq, d.Dv}, mem), Tensor({d.B, d.Hq, d.Sq}, mem),
                              c.rng};
  const std::vector<HeadRange> qa = g.split.q_all();
  const HeadPart back[] = {
      {&h.qu, qa, out_h, res.out.view(), false},
      {&h.qu, qa, rows_view(std::span<const float>(lse_h), d.B, h.qh.count, sq),
       rows_view(res.lse.span(), d.B, d.Hq, d.Sq), false}};
  to_sequence(ch, lease, r, n, 0, back);
  return res;
}

AttentionGradients heads_backward(const CpCall& c, const BackwardState& s, const HeadGroup& g,
                                  const BackwardCompute& compute) {
  const CpDims& d = c.d;
  const int r = g.comm.rank(), n = g.comm.size();
  MemoryCounter* mem = &c.comm.memory();
  WorkspaceLease lease(c.options.workspace, mem);
  CpChannel ch(g.comm, c.options.stats);
  const HeadSide h = head_side(c, g);
  const int64_t sq = h.qu.length(), sk = h.ku.length();
  Tensor delta =
      row_dot(s.dout, s.out, kernel_options(c.comm, c.options), mem);  // D_i, sequence side
  const View dq_h = lease.view(WB::kDq, {d.B, sq, h.qh.count, d.Dqk});
  const View dk_h = lease.view(WB::kDk, {d.B, sk, h.kvh.count, d.Dqk});
  const View dv_h = lease.view(WB::kDv, {d.B, sk, h.kvh.count, d.Dv});
  Tensor dsink = dsink_partial(c, mem);
  {
    const View q_h = lease.view(WB::kQ, {d.B, sq, h.qh.count, d.Dqk});
    const View k_h = lease.view(WB::kK, {d.B, sk, h.kvh.count, d.Dqk});
    const View v_h = lease.view(WB::kV, {d.B, sk, h.kvh.count, d.Dv});
    const View dout_h = lease.view(WB::kDout, {d.B, sq, h.qh.count, d.Dv});
    const std::span<float> lse_h = lease.get(WB::kLse, d.B * h.qh.count * sq);
    const std::span<float> delta_h = lease.get(WB::kDelta, d.B * h.qh.count * sq);
    const std::vector<HeadRange> qa = g.split.q_all(), kva = g.split.kv_all();
    const HeadPart in[] = {{&h.qu, qa, c.q, q_h, false},
                           {&h.ku, kva, c.k, k_h, false},
                           {&h.ku, kva, c.v, v_h, false},
                           {&h.qu, qa, s.dout, dout_h, false},
                           {&h.qu, qa, rows_view(s.lse, d.B, d.Hq, d.Sq),
                            rows_view(lse_h, d.B, h.qh.count, sq), false},
                           {&h.qu, qa, rows_view(std::as_const(delta).span(), d.B, d.Hq, d.Sq),
                            rows_view(delta_h, d.B, h.qh.count, sq), false}};
    to_heads(ch, lease, r, n, 1, in);
    delta = Tensor();
    compute(h, q_h, k_h, v_h, dout_h, lse_h, delta_h, dq_h, dk_h, dv_h, dsink.span(), lease);
    lease.done({WB::kQ, WB::kK, WB::kV, WB::kDout, WB::kLse, WB::kDelta});
  }
  AttentionGradients grads{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, mem),
                           Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, mem),
                           Tensor({d.B, d.Sk, d.Hkv, d.Dv}, mem)};
  const std::vector<HeadRange> qa = g.split.q_all(), kva = g.split.kv_all();
  const bool replicated = g.split.kv_replicated();
  const HeadPart back[] = {{&h.qu, qa, dq_h, grads.dq.view(), false},
                           {&h.ku, kva, dk_h, grads.dk.view(), replicated},
                           {&h.ku, kva, dv_h, grads.dv.view(), replicated}};
  to_sequence(ch, lease, r, n, 1, back);
  // Over the whole CP group (the hybrid's rows and columns alike).
  grads.dsink = reduce_dsink(c.comm, c.options, dsink.span(), mem);
  return grads;
}

std::vector<int> everyone(int world) {
  std::vector<int> m(static_cast<size_t>(world));
  std::iota(m.begin(), m.end(), 0);
  return m;
}

std::string ulysses_what(int n) { return str_cat("strategy ulysses over ", n, " ranks"); }

// The grid of a hybrid call: this rank's row (Ulysses) and column (ring) communicators and the
// block tables of the rows (the ring's blocks: the union of a row's shards).
struct Grid {
  int u, rows;
  std::unique_ptr<Communicator> row, column;
  std::vector<int> members;  // cp ranks of this row
  BlockTable q_rows, kv_rows;
};

Grid make_grid(const CpCall& c) {
  Grid g;
  g.u = c.options.strategy.ulysses_size;
  g.rows = c.options.strategy.ring_size;
  const int r = c.d.rank;
  // Rows of U consecutive ranks, numbered by rank; columns of the ranks equal mod U, by rank.
  g.row = c.comm.split(r / g.u, r);
  g.column = c.comm.split(r % g.u, r);
  for (int j = 0; j < g.rows; ++j) {
    std::vector<int> m(static_cast<size_t>(g.u));
    std::iota(m.begin(), m.end(), j * g.u);
    TokenUnion qu = token_union(c.q_seq, m), ku = token_union(c.kv_seq, m);
    g.q_rows.pos.push_back(std::move(qu.pos));
    g.q_rows.doc.push_back(std::move(qu.doc));
    g.kv_rows.pos.push_back(std::move(ku.pos));
    g.kv_rows.doc.push_back(std::move(ku.doc));
    if (j == r / g.u) g.members = std::move(m);
  }
  return g;
}

}  // namespace

detail::CpForwardResult ulysses_forward(const CpCall& c) {
  const CallTimer timer(c.options.stats);
  const std::string what = ulysses_what(c.d.world);
  const HeadGroup g{c.comm, everyone(c.d.world),
                    HeadSplit(c.d.Hq, c.d.Hkv, c.d.world, what.c_str())};
  return heads_forward(
      c, g,
      [&](const HeadSide& h, ConstView q, ConstView k, ConstView v, View out, std::span<float> lse,
          WorkspaceLease&) {
        AttentionInputs in{q, k, v, h.qu.pos, h.ku.pos, h.qu.doc, h.ku.doc};
        in.head_offset = h.qh.begin;
        in.total_heads = c.d.Hq;
        const ScopedSeconds t(c.options.stats ? &c.options.stats->kernel_seconds : nullptr);
        attention_kernel_forward(in, c.params, c.rng, out, lse, kernel_options(c.comm, c.options));
        if (c.options.stats != nullptr) ++c.options.stats->blocks_computed;
      });
}

AttentionGradients ulysses_backward(const CpCall& c, const BackwardState& s) {
  const CallTimer timer(c.options.stats);
  const std::string what = ulysses_what(c.d.world);
  const HeadGroup g{c.comm, everyone(c.d.world),
                    HeadSplit(c.d.Hq, c.d.Hkv, c.d.world, what.c_str())};
  return heads_backward(
      c, s, g,
      [&](const HeadSide& h, ConstView q, ConstView k, ConstView v, ConstView dout,
          std::span<const float> lse, std::span<const float> delta, View dq, View dk, View dv,
          std::span<float> dsink, WorkspaceLease&) {
        AttentionInputs in{q, k, v, h.qu.pos, h.ku.pos, h.qu.doc, h.ku.doc};
        in.head_offset = h.qh.begin;
        in.total_heads = c.d.Hq;
        BackwardOptions options;
        options.kernel = kernel_options(c.comm, c.options);
        options.delta = delta;
        options.dsink = dsink;  // this rank's heads over the whole sequence
        const ScopedSeconds t(c.options.stats ? &c.options.stats->kernel_seconds : nullptr);
        // With delta given the kernel never reads out (kernel.h): dout stands in for it.
        attention_kernel_backward(in, c.params, c.rng, dout, dout, lse, dq, dk, dv, options);
        if (c.options.stats != nullptr) ++c.options.stats->blocks_computed;
      });
}

detail::CpForwardResult hybrid_forward(const CpCall& c) {
  const CallTimer timer(c.options.stats);
  Grid grid = make_grid(c);
  const std::string what = ulysses_what(grid.u);
  const HeadGroup g{*grid.row, grid.members, HeadSplit(c.d.Hq, c.d.Hkv, grid.u, what.c_str())};
  return heads_forward(c, g,
                       [&](const HeadSide& h, ConstView q, ConstView k, ConstView v, View out,
                           std::span<float> lse, WorkspaceLease& lease) {
                         RingProblem p{q, k, v, &grid.q_rows, &grid.kv_rows, c.params, c.rng};
                         p.head_offset = h.qh.begin;
                         p.total_heads = c.d.Hq;
                         ring_forward(*grid.column, p, c.options, out, lse, &lease);
                       });
}

AttentionGradients hybrid_backward(const CpCall& c, const BackwardState& s) {
  const CallTimer timer(c.options.stats);
  Grid grid = make_grid(c);
  const std::string what = ulysses_what(grid.u);
  const HeadGroup g{*grid.row, grid.members, HeadSplit(c.d.Hq, c.d.Hkv, grid.u, what.c_str())};
  return heads_backward(
      c, s, g,
      [&](const HeadSide& h, ConstView q, ConstView k, ConstView v, ConstView dout,
          std::span<const float> lse, std::span<const float> delta, View dq, View dk, View dv,
          std::span<float> dsink, WorkspaceLease& lease) {
        RingProblem p{q, k, v, &grid.q_rows, &grid.kv_rows, c.params, c.rng};
        p.head_offset = h.qh.begin;
        p.total_heads = c.d.Hq;
        ring_backward(*grid.column, p, c.options, dout, lse, delta, dq, dk, dv, dsink, &lease);
      });
}

}  // namespace cpattn::detail
