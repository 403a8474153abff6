// The allgather strategy: every rank gathers the whole k/v once (in global token order) and runs
// one kernel call of its own queries against it; backward gathers k/v again, computes dk/dv of
// every key for its queries and reduce-scatters them, each home rank summing the P slices of its
// keys in rank order; the sink gradient of each rank's rows is summed over the group by one
// allreduce.
#include <numeric>
#include <vector>

#include "cp/strategy_detail.h"
#include "cp/transpose.h"
#include "cpattn/stopwatch.h"

namespace cpattn::detail {

namespace {

// The whole group as the members of one union: the unsharded sequence.
std::vector<int> everyone(int world) {
  std::vector<int> m(static_cast<size_t>(world));
  std::iota(m.begin(), m.end(), 0);
  return m;
}

using WB = WorkspaceBuffer;

// Every rank's k and v, all heads, into kw/vw [B, Sk, Hkv, D] (global token order).
void gather_kv(CpChannel& ch, WorkspaceLease& lease, const CpCall& c, const TokenUnion& ku, View kw,
               View vw, int phase) {
  const std::vector<HeadRange> all(static_cast<size_t>(c.d.world), HeadRange{0, c.d.Hkv});
  const HeadPart parts[] = {{&ku, all, c.k, kw, false}, {&ku, all, c.v, vw, false}};
  to_heads(ch, lease, c.d.rank, c.d.world, phase, parts);
}

}  // namespace

detail::CpForwardResult allgather_forward(const CpCall& c) {
  const CpDims& d = c.d;
  CpStats* stats = c.options.stats;
  const CallTimer timer(stats);
  MemoryCounter* mem = &c.comm.memory();
  WorkspaceLease lease(c.options.workspace, mem);
  CpChannel ch(c.comm, stats);
  const std::vector<int> members = everyone(d.world);
  const TokenUnion ku = token_union(c.kv_seq, members);
  const View kw = lease.view(WB::kK, {d.B, ku.length(), d.Hkv, d.Dqk});
  const View vw = lease.view(WB::kV, {d.B, ku.length(), d.Hkv, d.Dv});
  gather_kv(ch, lease, c, ku, kw, vw, 0);
  detail::CpForwardResult res{Tensor({d.B, d.Sq, d.Hq, d.Dv}, mem), Tensor({d.B, d.Hq, d.Sq}, mem),
                              c.rng};
  const std::vector<int64_t> q_pos = c.q_seq.local_positions(), q_doc = c.q_seq.local_docs();
  const AttentionInputs in{c.q, kw, vw, q_pos, ku.pos, q_doc, ku.doc};
  {
    const ScopedSeconds t(stats ? &stats->kernel_seconds : nullptr);
    attention_kernel_forward(in, c.params, c.rng, res.out.view(), res.lse.span(),
                             kernel_options(c.comm, c.options));
  }
  if (stats != nullptr) ++stats->blocks_computed;
  return res;
}

AttentionGradients allgather_backward(const CpCall& c, const BackwardState& s) {
  const CpDims& d = c.d;
  CpStats* stats = c.options.stats;
  const CallTimer timer(stats);
  MemoryCounter* mem = &c.comm.memory();
  WorkspaceLease lease(c.options.workspace, mem);
  CpChannel ch(c.comm, stats);
  const std::vector<int> members = everyone(d.world);
  const TokenUnion ku = token_union(c.kv_seq, members);
  AttentionGradients g{Tensor({d.B, d.Sq, d.Hq, d.Dqk}, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dqk}, mem),
                       Tensor({d.B, d.Sk, d.Hkv, d.Dv}, mem)};
  Tensor dsink = dsink_partial(c, mem);
  {
    // dk/dv of every key for this rank's queries, then summed at the keys' home ranks.
    const View dkw = lease.view(WB::kDk, {d.B, ku.length(), d.Hkv, d.Dqk});
    const View dvw = lease.view(WB::kDv, {d.B, ku.length(), d.Hkv, d.Dv});
    {
      const View kw = lease.view(WB::kK, {d.B, ku.length(), d.Hkv, d.Dqk});
      const View vw = lease.view(WB::kV, {d.B, ku.length(), d.Hkv, d.Dv});
      gather_kv(ch, lease, c, ku, kw, vw, 1);
      const std::vector<int64_t> q_pos = c.q_seq.local_positions(), q_doc = c.q_seq.local_docs();
      const AttentionInputs in{c.q, kw, vw, q_pos, ku.pos, q_doc, ku.doc};
      BackwardOptions options;
      options.kernel = kernel_options(c.comm, c.options);
      options.dsink = dsink.span();  // this rank's rows, every head
      const ScopedSeconds t(stats ? &stats->kernel_seconds : nullptr);
      attention_kernel_backward(in, c.params, c.rng, s.dout, s.out, s.lse, g.dq.view(), dkw, dvw,
                                options);
      lease.done({WB::kK, WB::kV});
    }
    if (stats != nullptr) ++stats->blocks_computed;
    const std::vector<HeadRange> all(static_cast<size_t>(d.world), HeadRange{0, d.Hkv});
    const HeadPart parts[] = {{&ku, all, dkw, g.dk.view(), true},
                              {&ku, all, dvw, g.dv.view(), true}};
    to_sequence(ch, lease, d.rank, d.world, 0, parts);
  }
  g.dsink = reduce_dsink(c.comm, c.options, dsink.span(), mem);
  return g;
}

}  // namespace cpattn::detail
