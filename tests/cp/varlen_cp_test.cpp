// Varlen calls (flash-attn's cu_seqlens) under context parallelism: the shardings of
// varlen_shardings (layout.h) on the document-balanced layout, every strategy at P = 1, 4 and 8,
// against each document run alone through the kernel (no dropout) and against the float64
// reference with the same positions (dropout); documents of 1 and 0 tokens, Lq != Lk, GQA,
// causal, full and windowed.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/error.h"
#include "cpattn/strategy.h"
#include "cpattn/varlen.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using Ids = std::vector<int64_t>;
using reference::MaskKind;

Ids cumulative(const Ids& lengths) {
  Ids cu{0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

// Every strategy a group of P ranks runs with 8 query and 2 kv heads.
std::vector<Strategy> strategies(int P) {
  std::vector<Strategy> all = {Strategy::ring(), Strategy::allgather(), Strategy::ulysses()};
  for (int u = 2; u < P; ++u) {
    if (P % u == 0) all.push_back(Strategy::hybrid(u, P / u));
  }
  return all;
}

struct Documents {
  std::string name;
  Ids lq, lk;
};

Ids random_lengths(size_t n, int64_t longest, uint64_t seed) {
  std::mt19937_64 gen(seed);
  Ids l(n);
  for (int64_t& x : l) {
    // One in four documents is short (0..3 tokens), the others up to `longest`.
    x = gen() % 4 == 0 ? static_cast<int64_t>(gen() % 4)
                       : static_cast<int64_t>(gen() % static_cast<uint64_t>(longest + 1));
  }
  return l;
}

std::vector<Documents> documents() {
  const Ids issue{1, 7, 300, 0, 5, 1025};
  return {
      {"issue", issue, issue},
      {"random", random_lengths(24, 120, 8), random_lengths(24, 120, 8)},
      {"cross", {5, 0, 8, 1, 60, 3, 200}, {9, 2, 1, 0, 17, 3, 150}},
  };
}

reference::Problem varlen_problem(const Documents& docs, MaskKind mask, float dropout_p,
                                  uint64_t seed) {
  reference::CaseSpec s;
  s.mask = mask;
  s.dims = {1, 0, 0, 8, 2, 16, 16};
  s.dropout_p = dropout_p;
  s.seed = seed;
  return reference::make_varlen_problem(s, cumulative(docs.lq), cumulative(docs.lk));
}

RingRun varlen_run(const Documents& docs, int P, const Strategy& strategy) {
  RingRun run{P, Layout::kDocZigzag};
  run.strategy = strategy;
  run.cu_seqlens_q = cumulative(docs.lq);
  run.cu_seqlens_k = cumulative(docs.lk);
  return run;
}

// Without dropout, every strategy's result equals each document run alone (its own
// bottom-right-aligned one-document call) within 1e-5 of the largest magnitude, forward and
// backward.
TEST(VarlenCp, EveryStrategyEqualsEachDocumentAlone) {
  uint64_t seed = 500;
  for (const Documents& docs : documents()) {
    for (const MaskKind mask : {MaskKind::kCausal, MaskKind::kNone, MaskKind::kCausalWindow}) {
      const reference::Problem p = varlen_problem(docs, mask, 0.0f, ++seed);
      const reference::Outputs alone =
          reference::run_kernel_per_document(p, cumulative(docs.lq), cumulative(docs.lk), {});
      for (const int P : {1, 4, 8}) {
        for (const Strategy& strategy : strategies(P)) {
          SCOPED_TRACE(docs.name + " " + reference::mask_kind_name(mask) + " P " +
                       std::to_string(P) + " " + strategy_name(strategy));
          EXPECT_TRUE(outputs_near(run_ring(p, varlen_run(docs, P, strategy)), alone, 1e-5));
        }
      }
    }
  }
}

// With dropout the packed call's masks are those of its global positions: every strategy against
// the float64 reference with the same positions, under the kernel's accuracy rule.
TEST(VarlenCp, WithDropoutEveryStrategyMatchesTheReference) {
  uint64_t seed = 600;
  for (const Documents& docs : documents()) {
    const reference::Problem p = varlen_problem(docs, MaskKind::kCausal, 0.15f, ++seed);
    const reference::Oracle oracle = reference::make_oracle(p);
    for (const int P : {4, 8}) {
      for (const Strategy& strategy : strategies(P)) {
        SCOPED_TRACE(docs.name + " P " + std::to_string(P) + " " + strategy_name(strategy));
        EXPECT_TRUE(row_passes(
            reference::compare(docs.name, oracle, run_ring(p, varlen_run(docs, P, strategy)))));
      }
    }
  }
}

// varlen_shardings is the problem's positions and document ids on the layout: the same shardings
// the problem's own arrays give (identity positions left empty for self-attention).
TEST(VarlenCp, ShardingsCarryTheVarlenPositionsAndDocuments) {
  for (const Documents& docs : documents()) {
    const Ids cu_q = cumulative(docs.lq), cu_k = cumulative(docs.lk);
    const VarlenTokens t = varlen_tokens(cu_q, cu_k, cu_q.back(), cu_k.back());
    for (int r = 0; r < 4; ++r) {
      const VarlenShardings s =
          varlen_shardings(Layout::kDocZigzag, cu_q, cu_k, cu_q.back(), cu_k.back(), 4, r);
      EXPECT_EQ(s.q.docs, t.q_doc);
      EXPECT_EQ(s.kv.docs, t.k_doc);
      EXPECT_EQ(s.q.layout, Layout::kDocZigzag);
      EXPECT_EQ(s.q.cp_rank, r);
      EXPECT_EQ(s.q.local_positions(2), shard_values(t.q_pos, s.q, 2));
      EXPECT_EQ(s.kv.local_positions(3), shard_values(t.k_pos, s.kv, 3));
      EXPECT_EQ(s.q.positions.empty(), docs.lq == docs.lk);
    }
  }
  const Error e = error_of([] {
    const Ids cu{0, 4, 9};
    varlen_shardings(Layout::kDocZigzag, cu, cu, 9, 9, 4, 4);
  });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpattn::testing
