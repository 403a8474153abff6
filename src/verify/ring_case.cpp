// Sharding a reference problem over P ranks, running the ring and gathering (ring_case.h).
#include "verify/ring_case.h"

#include <array>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"

namespace cpattn::reference {

namespace {

// Writes a rank's [B, S_r, H, D] piece into the whole flat BSHD doubles at token rows idx.
void scatter_rows(ConstView piece, const std::vector<int64_t>& idx, int64_t seq_len,
                  std::vector<double>& whole) {
  const auto& s = piece.shape;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d)
          whole[static_cast<size_t>(
              ((b * seq_len + idx[static_cast<size_t>(i)]) * s[2] + h) * s[3] + d)] =
              read_element(piece, b, i, h, d);
}

// The sharding of the problem's q (is_q) or k/v sequence on `rank`. Identity positions stay
// implicit so that both the implicit and the explicit position paths of the ring get used.
SequenceSharding problem_sharding(const Problem& p, bool is_q, const RingRun& run, int rank) {
  SequenceSharding s =
      SequenceSharding::of(run.layout, is_q ? p.dims.Sq : p.dims.Sk, run.cp_size, rank);
  const std::vector<int64_t>& pos = is_q ? p.q_pos : p.k_pos;
  bool identity = true;
  for (size_t i = 0; i < pos.size(); ++i) identity = identity && pos[i] == static_cast<int64_t>(i);
  if (!identity) s.positions = pos;
  s.docs = is_q ? p.q_doc : p.k_doc;
  return s;
}

// Every rank of a CP call returns the same sink gradient, bit for bit (AttentionGradients::
// dsink: the allreduce of the partials): one all_to_all of every rank's bits, compared here on
// every rank.
void check_dsink_agrees(Communicator& comm, const Tensor& dsink) {
  const int P = comm.size();
  if (dsink.numel() == 0 || P == 1) return;
  const auto n = static_cast<size_t>(dsink.numel());
  const std::span<const float> mine = dsink.span();
  std::vector<float> send, recv(n * static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) send.insert(send.end(), mine.begin(), mine.end());
  comm.all_to_all(std::span<const float>(send), std::span<float>(recv));
  for (int r = 0; r < P; ++r) {
    CPATTN_CHECK(
        std::memcmp(recv.data() + static_cast<size_t>(r) * n, mine.data(), n * sizeof(float)) == 0,
        ErrorCode::kInternal, "dsink of rank ", r, " differs from rank ", comm.rank(),
        "'s: every rank of a CP call must return the same bits");
  }
}

}  // namespace

Outputs zero_outputs(const Dims& d, bool backward) {
  Outputs all;
  all.out.resize(static_cast<size_t>(d.B * d.Sq * d.Hq * d.Dv));
  all.lse.resize(static_cast<size_t>(d.B * d.Hq * d.Sq));
  if (backward) {
    all.dq.resize(static_cast<size_t>(d.B * d.Sq * d.Hq * d.Dqk));
    all.dk.resize(static_cast<size_t>(d.B * d.Sk * d.Hkv * d.Dqk));
    all.dv.resize(static_cast<size_t>(d.B * d.Sk * d.Hkv * d.Dv));
  }
  return all;
}

void run_ring_rank(Communicator& comm, const Problem& p, const ProblemTensors& whole,
                   const RingRun& run, Outputs& all) {
  CPATTN_CHECK_EQ(comm.size(), run.cp_size, ErrorCode::kInvalidArgument,
                  "run_ring_rank: communicator size (RingRun.cp_size)");
  const Dims& d = p.dims;
  const int r = comm.rank();
  MemoryCounter* mem = &comm.memory();
  SequenceSharding qs, ks;
  if (run.cu_seqlens_q.empty() && run.cu_seqlens_k.empty()) {
    qs = problem_sharding(p, true, run, r);
    ks = problem_sharding(p, false, run, r);
  } else {
    VarlenShardings v = varlen_shardings(run.layout, run.cu_seqlens_q, run.cu_seqlens_k, d.Sq, d.Sk,
                                         run.cp_size, r);
    qs = std::move(v.q);
    ks = std::move(v.kv);
  }
  const MemoryLayout m = run.memory;
  const auto local = [&](const Tensor& t, const SequenceSharding& seq) {
    return dense_copy(shard_tensor(t.view(), seq, r, mem).view(), run.dtype, m, mem);
  };
  const Tensor q_r = local(whole.q, qs), k_r = local(whole.k, ks), v_r = local(whole.v, ks);
  CpOptions options;
  options.num_threads = run.num_threads;
  options.strategy = run.strategy;
  options.document_aware = run.document_aware;
  options.isa = run.isa;
  if (!run.stats.empty()) options.stats = &run.stats[static_cast<size_t>(r)];
  if (!run.workspaces.empty()) options.workspace = &run.workspaces[static_cast<size_t>(r)];
  const detail::CpForwardResult fwd = detail::cp_attention_forward(
      comm, q_r.view(m), k_r.view(m), v_r.view(m), qs, ks, p.params, p.rng, options);
  const std::vector<int64_t> q_idx = shard_token_indices(qs, r);
  const std::vector<int64_t> k_idx = shard_token_indices(ks, r);
  scatter_rows(fwd.out.view(), q_idx, d.Sq, all.out);
  const int64_t sr = static_cast<int64_t>(q_idx.size());
  for (int64_t bh = 0; bh < d.B * d.Hq; ++bh)
    for (int64_t i = 0; i < sr; ++i)
      all.lse[static_cast<size_t>(bh * d.Sq + q_idx[static_cast<size_t>(i)])] =
          fwd.lse.data()[bh * sr + i];
  if (!run.backward) return;
  const Tensor dout_r = local(whole.dout, qs);
  const AttentionGradients g = detail::cp_attention_backward(
      comm, dout_r.view(m), q_r.view(m), k_r.view(m), v_r.view(m), fwd.out.view(), fwd.lse.span(),
      qs, ks, p.params, fwd.rng, options);
  scatter_rows(g.dq.view(), q_idx, d.Sq, all.dq);
  scatter_rows(g.dk.view(), k_idx, d.Sk, all.dk);
  scatter_rows(g.dv.view(), k_idx, d.Sk, all.dv);
  check_dsink_agrees(comm, g.dsink);
  if (r == 0 && !p.params.sink.empty()) all.dsink = to_doubles(std::as_const(g.dsink).span());
}

Outputs run_ring_gathered(Communicator& comm, const Problem& p, const RingRun& run) {
  Outputs all = zero_outputs(p.dims, run.backward);
  run_ring_rank(comm, p, ProblemTensors(p), run, all);
  // Rank 0's dsink, zeros elsewhere.
  if (run.backward && !p.params.sink.empty()) all.dsink.resize(static_cast<size_t>(p.dims.Hq));
  for (std::vector<double>* t : {&all.out, &all.lse, &all.dq, &all.dk, &all.dv, &all.dsink}) {
    comm.allreduce_sum(std::span<double>(*t));
  }
  return all;
}

Outputs run_ring(const Problem& p, const RingRun& run, const RankWrapper& wrap) {
  const ProblemTensors whole(p);
  Outputs all = zero_outputs(p.dims, run.backward);
  const std::function<void(Communicator&)> body = [&](Communicator& comm) {
    run_ring_rank(comm, p, whole, run, all);
  };
  run_ranks(run.cp_size, [&](Communicator& comm) {
    if (wrap) {
      wrap(comm, body);
    } else {
      body(comm);
    }
  });
  return all;
}

}  // namespace cpattn::reference
