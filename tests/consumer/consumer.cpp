// A downstream program: causal attention with dropout over a 2-rank CP group of in-process ranks
// through the installed public API, checked against the same attention on one rank.
#include <cpattn/attention.h>
#include <cpattn/generator.h>
#include <cpattn/thread_communicator.h>
#include <cpattn/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

namespace {

constexpr int64_t kB = 1, kS = 64, kHq = 4, kHkv = 2, kD = 16;

// Deterministic values in [-1, 1).
void fill(cpattn::Tensor& t, uint32_t seed) {
  uint32_t x = seed;
  for (float& v : t.span()) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x >> 8) * 0x1.0p-23f - 1.0f;
  }
}

struct Result {
  cpattn::Tensor out, dq;  // whole sequence [B, S, H, D]
};

// Forward + backward on P ranks (zigzag), gathered into whole-sequence out and dq.
Result run(int P, const cpattn::Tensor& q, const cpattn::Tensor& k, const cpattn::Tensor& v,
           const cpattn::Tensor& dout) {
  cpattn::AttentionParams params;
  params.causal = true;
  params.dropout_p = 0.1f;
  std::vector<cpattn::Tensor> outs(static_cast<size_t>(P)), dqs(static_cast<size_t>(P));
  cpattn::run_ranks(P, [&](cpattn::Communicator& comm) {
    const int r = comm.rank();
    const auto seq = cpattn::SequenceSharding::of(cpattn::Layout::kZigzag, kS, P, r);
    const auto shard = [&](const cpattn::Tensor& t) {
      return cpattn::shard_tensor(t.view(), seq, r, &comm.memory());
    };
    const cpattn::Tensor qr = shard(q), kr = shard(k), vr = shard(v), dr = shard(dout);
    cpattn::Generator gen(/*seed=*/42);  // every rank draws the same RngState
    const cpattn::RngState rng = gen.next();
    const cpattn::ForwardResult fwd =
        cpattn::attention_forward(comm, qr.view(), kr.view(), vr.view(), seq, params, rng);
    cpattn::AttentionGradients g = cpattn::attention_backward(comm, dr.view(), qr.view(), kr.view(),
                                                              vr.view(), fwd, seq, params, rng);
    outs[static_cast<size_t>(r)] = fwd.out.clone();
    dqs[static_cast<size_t>(r)] = std::move(g.dq);
  });
  std::vector<cpattn::ConstView> out_views, dq_views;
  for (int r = 0; r < P; ++r) {
    out_views.push_back(outs[static_cast<size_t>(r)].view());
    dq_views.push_back(dqs[static_cast<size_t>(r)].view());
  }
  const auto whole = cpattn::SequenceSharding::of(cpattn::Layout::kZigzag, kS, P, 0);
  return {cpattn::unshard_tensor(out_views, whole), cpattn::unshard_tensor(dq_views, whole)};
}

double max_abs_diff(const cpattn::Tensor& a, const cpattn::Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a.data()[i] - b.data()[i])));
  }
  return m;
}

}  // namespace

int main() {
  if (std::string(cpattn::library_version()) != CPATTN_VERSION_STRING) {
    std::fprintf(stderr, "consumer: headers %s but library %s\n", CPATTN_VERSION_STRING,
                 cpattn::library_version());
    return 1;
  }
  cpattn::Tensor q({kB, kS, kHq, kD}), k({kB, kS, kHkv, kD}), v({kB, kS, kHkv, kD}),
      dout({kB, kS, kHq, kD});
  fill(q, 1);
  fill(k, 2);
  fill(v, 3);
  fill(dout, 4);
  const Result one = run(1, q, k, v, dout), two = run(2, q, k, v, dout);
  const double out_err = max_abs_diff(one.out, two.out), dq_err = max_abs_diff(one.dq, two.dq);
  const cpattn::StateMemoryStats stats = cpattn::memory_stats();
  std::printf("consumer: cpattn %s, cp=2 vs cp=1: out %.2e, dq %.2e, live ForwardResults %lld\n",
              cpattn::library_version(), out_err, dq_err,
              static_cast<long long>(stats.live_forward_results));
  const bool ok = out_err < 1e-5 && dq_err < 1e-5 && stats.live_forward_results == 0;
  std::printf("consumer: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
