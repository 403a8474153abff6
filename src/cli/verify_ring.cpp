// The ring part of `cpattn verify` (verify_ring.h): shard a reference problem over P in-process
// ranks, run ring forward + backward, gather, and judge against the double reference.
#include "cli/verify_ring.h"

#include <string>

#include "cpattn/error.h"
#include "cpattn/layout.h"
#include "cpattn/ring.h"
#include "cpattn/thread_communicator.h"

namespace cpattn::cli {

namespace {

Tensor to_floats(const std::vector<double>& x, std::array<int64_t, 4> shape) {
  Tensor t({shape[0], shape[1], shape[2], shape[3]});
  for (size_t i = 0; i < x.size(); ++i) t.data()[i] = static_cast<float>(x[i]);
  return t;
}

// Copies a rank's [B, S_r, H, D] rows into the whole flat BSHD doubles at token rows idx.
void scatter(ConstView piece, const std::vector<int64_t>& idx, int64_t seq_len,
             std::vector<double>& whole) {
  const auto& s = piece.shape;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d)
          whole[static_cast<size_t>(
              ((b * seq_len + idx[static_cast<size_t>(i)]) * s[2] + h) * s[3] + d)] =
              piece(b, i, h, d);
}

// Ring forward + backward of a self-attention problem (positions 0..S-1) over P ranks.
reference::Outputs run_ring(const reference::Problem& p, int P, Layout layout) {
  const reference::Dims& d = p.dims;
  const Tensor q = to_floats(p.q, {d.B, d.Sq, d.Hq, d.Dqk});
  const Tensor k = to_floats(p.k, {d.B, d.Sk, d.Hkv, d.Dqk});
  const Tensor v = to_floats(p.v, {d.B, d.Sk, d.Hkv, d.Dv});
  const Tensor dout = to_floats(p.dout, {d.B, d.Sq, d.Hq, d.Dv});
  reference::Outputs all;
  all.out.resize(static_cast<size_t>(d.B * d.Sq * d.Hq * d.Dv));
  all.lse.resize(static_cast<size_t>(d.B * d.Hq * d.Sq));
  all.dq.resize(static_cast<size_t>(d.B * d.Sq * d.Hq * d.Dqk));
  all.dk.resize(static_cast<size_t>(d.B * d.Sk * d.Hkv * d.Dqk));
  all.dv.resize(static_cast<size_t>(d.B * d.Sk * d.Hkv * d.Dv));
  run_ranks(P, [&](Communicator& comm) {
    const int r = comm.rank();
    MemoryCounter* mem = &comm.memory();
    SequenceSharding s;
    s.layout = layout;
    s.seq_len = d.Sq;
    s.cp_size = P;
    s.cp_rank = r;
    s.docs = p.q_doc;
    const Tensor q_r = shard_tensor(q.view(), layout, P, r, mem);
    const Tensor k_r = shard_tensor(k.view(), layout, P, r, mem);
    const Tensor v_r = shard_tensor(v.view(), layout, P, r, mem);
    const Tensor dout_r = shard_tensor(dout.view(), layout, P, r, mem);
    const RingForwardResult f =
        ring_attention_forward(comm, q_r.view(), k_r.view(), v_r.view(), s, p.params, p.rng);
    const RingGradients g =
        ring_attention_backward(comm, dout_r.view(), q_r.view(), k_r.view(), v_r.view(),
                                f.out.view(), f.lse.span(), s, p.params, f.rng);
    // Each rank writes only its own rows, so the shared vectors need no lock.
    const std::vector<int64_t> idx = shard_token_indices(layout, d.Sq, P, r);
    const int64_t n = static_cast<int64_t>(idx.size());
    scatter(f.out.view(), idx, d.Sq, all.out);
    for (int64_t bh = 0; bh < d.B * d.Hq; ++bh)
      for (int64_t i = 0; i < n; ++i)
        all.lse[static_cast<size_t>(bh * d.Sq + idx[static_cast<size_t>(i)])] =
            f.lse.data()[bh * n + i];
    scatter(g.dq.view(), idx, d.Sq, all.dq);
    scatter(g.dk.view(), idx, d.Sk, all.dk);
    scatter(g.dv.view(), idx, d.Sk, all.dv);
  });
  return all;
}

reference::CaseSpec spec(reference::MaskKind mask, int64_t S, int64_t hq, int64_t hkv, int64_t dqk,
                         int64_t dv, float dropout, uint64_t seed) {
  reference::CaseSpec c;
  c.mask = mask;
  c.dims = {1, S, S, hq, hkv, dqk, dv};
  c.dropout_p = dropout;
  c.seed = seed;
  return c;
}

}  // namespace

std::vector<reference::ErrorRow> verify_ring(const std::vector<int>& cp_sizes) {
  const std::vector<reference::CaseSpec> specs = {
      spec(reference::MaskKind::kCausal, 197, 8, 2, 32, 32, 0.1f, 101),
      spec(reference::MaskKind::kDocsCausal, 301, 4, 1, 16, 16, 0.0f, 102),
      spec(reference::MaskKind::kWindow, 97, 2, 1, 192, 128, 0.0f, 103),
  };
  std::vector<reference::ErrorRow> rows;
  for (const reference::CaseSpec& c : specs) {
    const reference::Problem p = reference::make_problem(c);
    const reference::Outputs exact = reference::attention(p);
    const reference::Outputs fp32 = reference::attention_fp32(p);
    for (int P : cp_sizes) {
      CPATTN_CHECK(P >= 1, ErrorCode::kInvalidArgument, "--cp: expected sizes >= 1, got ", P);
      for (Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
        const std::string name =
            reference::case_name(c) + "_" + layout_name(layout) + "_cp" + std::to_string(P);
        rows.push_back(reference::compare(name, exact, fp32, run_ring(p, P, layout)));
      }
    }
  }
  return rows;
}

int print_ring_rows(const std::vector<reference::ErrorRow>& rows, std::FILE* out) {
  int failed = 0;
  for (const reference::ErrorRow& row : rows) {
    const bool ok = row.pass();
    failed += ok ? 0 : 1;
    std::fprintf(out, "%s %s", ok ? "PASS" : "FAIL", row.name.c_str());
    for (size_t t = 0; t < row.err.size(); ++t) {
      std::fprintf(out, "  %s %.1e/%.1e", reference::kTensorNames[t], row.err[t], row.tol[t]);
    }
    std::fprintf(out, "\n");
  }
  return failed;
}

}  // namespace cpattn::cli
