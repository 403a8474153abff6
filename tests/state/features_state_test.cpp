// Sinks, softcap, ALiBi and mask slices in the safe API (docs/design.md section 6): every strategy
// returns the sinks' gradient (AttentionGradients::dsink) on every rank, the same bits everywhere
// and near the single-rank kernel's; recompute gives the very same gradients; a backward or
// recompute whose sink, softcap, slopes or slices differ from the forward's is refused naming
// the field, and a rank whose differ from the others' fails the call agreement on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "cpattn/recompute.h"
#include "state/stack_harness.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kS = 53, kHq = 4, kHkv = 2, kD = 8;

// Document ids of the packed sequence: lengths 20, 1, 32.
std::vector<int64_t> documents() {
  std::vector<int64_t> d(kS, 2);
  for (int64_t i = 0; i < 21; ++i) d[static_cast<size_t>(i)] = i < 20 ? 0 : 1;
  return d;
}

// sink + softcap + ALiBi + window + documents + dropout, or slices + sink + dropout.
AttentionParams featured(bool slices) {
  AttentionParams p;
  p.dropout_p = 0.1f;
  p.sink = {0.5f, -1.0f, 2.0f, 0.0f};
  if (slices) {
    // Prefix-LM: [0, 8) bidirectional, causal after.
    p.slices = {{0, kS, 0, 8, SliceType::kFull}, {8, kS, 8, kS, SliceType::kCausal}};
  } else {
    p.causal = true;
    p.window_left = 24;
    p.softcap = 5.0f;
    p.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  }
  return p;
}

// The whole problem: q, k, v, dout [1, S, H, D] (k, v with Hkv heads), values from `seed`.
struct Whole {
  Tensor q{{1, kS, kHq, kD}}, k{{1, kS, kHkv, kD}}, v{{1, kS, kHkv, kD}}, dout{{1, kS, kHq, kD}};
  explicit Whole(uint64_t seed) {
    fill_uniform(q, seed);
    fill_uniform(k, seed + 1);
    fill_uniform(v, seed + 2);
    fill_uniform(dout, seed + 3);
  }
};

struct Gathered {
  std::vector<float> dq, dk, dv;
  std::vector<std::vector<float>> dsink;  // per rank
};

// Forward + backward of the safe API on P ranks (and, with `recompute`, the checkpointed
// forward and recompute_backward), gathered into whole-sequence order.
Gathered safe_api(const Whole& w, const AttentionParams& params, bool docs,
                  const Strategy& strategy, int P, bool recompute) {
  Gathered g{std::vector<float>(static_cast<size_t>(w.q.numel())),
             std::vector<float>(static_cast<size_t>(w.k.numel())),
             std::vector<float>(static_cast<size_t>(w.v.numel())),
             std::vector<std::vector<float>>(static_cast<size_t>(P))};
  std::mutex mu;
  run_ranks(P, [&](Communicator& comm) {
    const int r = comm.rank();
    SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, kS, P, r);
    if (docs) seq.docs = documents();
    MemoryCounter* mem = &comm.memory();
    const auto shard = [&](const Tensor& t) { return shard_tensor(t.view(), seq, r, mem); };
    const Tensor q = shard(w.q), k = shard(w.k), v = shard(w.v), dout = shard(w.dout);
    CpOptions options;
    options.strategy = strategy;
    const RngState rng{21, 4};
    AttentionGradients grads;
    if (recompute) {
      const AttentionCheckpoint checkpoint = make_checkpoint(
          attention_forward(comm, q.view(), k.view(), v.view(), seq, params, rng, options));
      RecomputeOptions ro;
      ro.cp = options;
      grads = recompute_backward(comm, checkpoint, rng, dout.view(), q.view(), k.view(), v.view(),
                                 seq, params, ro);
    } else {
      const ForwardResult f =
          attention_forward(comm, q.view(), k.view(), v.view(), seq, params, rng, options);
      grads = attention_backward(comm, dout.view(), q.view(), k.view(), v.view(), f, seq, params,
                                 rng, options);
    }
    const std::vector<int64_t> idx = shard_token_indices(seq, r);
    const std::lock_guard<std::mutex> lock(mu);
    gather_rows(grads.dq.view(), idx, kS, g.dq);
    gather_rows(grads.dk.view(), idx, kS, g.dk);
    gather_rows(grads.dv.view(), idx, kS, g.dv);
    g.dsink[static_cast<size_t>(r)].assign(grads.dsink.span().begin(), grads.dsink.span().end());
  });
  return g;
}

// The single-rank kernel on the whole sequence.
AttentionGradients kernel_grads(const Whole& w, const AttentionParams& params, bool docs) {
  std::vector<int64_t> pos(kS);
  for (int64_t i = 0; i < kS; ++i) pos[static_cast<size_t>(i)] = i;
  const std::vector<int64_t> doc = docs ? documents() : std::vector<int64_t>{};
  const AttentionInputs in{w.q.view(), w.k.view(), w.v.view(), pos, pos, doc, doc};
  const RngState rng{21, 4};
  const KernelForwardResult f = attention_kernel_forward(in, params, rng);
  return attention_kernel_backward(in, params, rng, w.dout.view(), f.out.view(), f.lse.span());
}

std::vector<float> values(const Tensor& t) { return {t.span().begin(), t.span().end()}; }

TEST(SafeApiFeatures, DsinkOnEveryRankRecomputeBitwiseAndNearTheKernel) {
  const Whole w(31);
  for (const bool slices : {false, true}) {
    const AttentionParams params = featured(slices);
    const bool docs = !slices;
    const AttentionGradients one = kernel_grads(w, params, docs);
    ASSERT_EQ(one.dsink.numel(), kHq);
    for (const Strategy& strategy :
         {Strategy::ring(), Strategy::allgather(), Strategy::ulysses(), Strategy::hybrid(2, 2)}) {
      SCOPED_TRACE(strategy_name(strategy) + (slices ? " slices" : " sink+softcap+alibi+docs"));
      const Gathered plain = safe_api(w, params, docs, strategy, 4, false);
      const Gathered again = safe_api(w, params, docs, strategy, 4, true);
      EXPECT_EQ(again.dq, plain.dq) << "recompute must replay the very same kernels";
      EXPECT_EQ(again.dk, plain.dk);
      EXPECT_EQ(again.dv, plain.dv);
      EXPECT_EQ(again.dsink, plain.dsink);
      ASSERT_EQ(plain.dsink[0].size(), static_cast<size_t>(kHq));
      for (size_t r = 1; r < plain.dsink.size(); ++r) {
        EXPECT_TRUE(bitwise_equal(plain.dsink[r], plain.dsink[0])) << "rank " << r;
      }
      // Other ranks cut the softmax and the sums elsewhere: fp32 rounding only.
      EXPECT_LT(relative_difference(plain.dq, values(one.dq)), 2e-5);
      EXPECT_LT(relative_difference(plain.dk, values(one.dk)), 2e-5);
      EXPECT_LT(relative_difference(plain.dv, values(one.dv)), 2e-5);
      EXPECT_LT(relative_difference(plain.dsink[0], values(one.dsink)), 2e-5);
    }
  }
}

// A call without sinks returns an empty dsink on every rank.
TEST(SafeApiFeatures, NoSinksNoDsink) {
  const Whole w(41);
  AttentionParams params;
  params.causal = true;
  for (const std::vector<float>& dsink :
       safe_api(w, params, false, Strategy::ring(), 2, false).dsink) {
    EXPECT_TRUE(dsink.empty());
  }
}

// What differs between the forward (or every other rank) and the call under test.
const std::vector<std::pair<std::string, std::function<void(AttentionParams&)>>> kChanges = {
    {"sink digest", [](AttentionParams& p) { p.sink[2] = 2.5f; }},
    {"softcap", [](AttentionParams& p) { p.softcap = 6.0f; }},
    {"alibi_slopes digest", [](AttentionParams& p) { p.alibi_slopes.clear(); }},
    {"slices digest",
     [](AttentionParams& p) {
       p.slices = {{0, kS, 0, kS, SliceType::kInverseCausal}};
     }},
};

// A backward, or a recompute, whose score features differ from the forward's is refused before
// any message, naming the field, on every rank.
TEST(SafeApiFeatures, BackwardOrRecomputeWithOtherFeaturesIsRefusedNamingTheField) {
  const Whole w(51);
  for (const auto& labelled_change : kChanges) {
    const std::string& label = labelled_change.first;
    const std::function<void(AttentionParams&)>& change = labelled_change.second;
    for (const bool recompute : {false, true}) {
      SCOPED_TRACE(label + (recompute ? " recompute" : " backward"));
      const RankOutcomes o = run_all(2, [&](Communicator& comm) {
        const int r = comm.rank();
        SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, kS, 2, r);
        seq.docs = documents();
        const Tensor q = shard_tensor(w.q.view(), seq, r, &comm.memory());
        const Tensor kv = shard_tensor(w.k.view(), seq, r, &comm.memory());
        const AttentionParams params = featured(false);
        AttentionParams other = params;
        change(other);
        const ForwardResult f =
            attention_forward(comm, q.view(), kv.view(), kv.view(), seq, params, {3, 0});
        if (recompute) {
          recompute_backward(comm, make_checkpoint(f), {3, 0}, q.view(), q.view(), kv.view(),
                             kv.view(), seq, other);
        } else {
          attention_backward(comm, q.view(), q.view(), kv.view(), kv.view(), f, seq, other, {3, 0});
        }
      });
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(o.codes[static_cast<size_t>(r)],
                  recompute ? ErrorCode::kRecomputeDiverged : ErrorCode::kStateMismatch);
        EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                    HasSubstr("ForwardResult was produced with " + label + "="));
      }
    }
  }
}

// One rank of four calls with another sink value (or softcap, slopes, slices): every rank throws
// kRankDisagreement naming the field and that rank.
TEST(SafeApiFeatures, ARankWithOtherFeaturesFailsEveryRankNamingTheField) {
  const Whole w(61);
  for (const auto& labelled_change : kChanges) {
    const std::string& label = labelled_change.first;
    const std::function<void(AttentionParams&)>& change = labelled_change.second;
    SCOPED_TRACE(label);
    const RankOutcomes o = run_all(4, [&](Communicator& comm) {
      const int r = comm.rank();
      SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, kS, 4, r);
      seq.docs = documents();
      const Tensor q = shard_tensor(w.q.view(), seq, r, &comm.memory());
      const Tensor kv = shard_tensor(w.k.view(), seq, r, &comm.memory());
      AttentionParams params = featured(false);
      if (r == 2) change(params);
      attention_forward(comm, q.view(), kv.view(), kv.view(), seq, params, {3, 0});
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << "rank " << r;
      EXPECT_THAT(o.messages[static_cast<size_t>(r)], HasSubstr("rank 2 has " + label + "="));
      EXPECT_THAT(o.messages[static_cast<size_t>(r)], HasSubstr("ranks 0, 1, 3 have " + label));
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
