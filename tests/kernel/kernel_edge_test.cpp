// Kernel edge cases: empty rows, rows visible only in some tiles, empty sequences and batches,
// a zero-width window, one-token documents, positions beyond 32 bits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "support/metrics.h"
#include "support/problem_tensors.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

reference::Problem random_problem(reference::Dims dims, uint64_t seed) {
  reference::CaseSpec spec;
  spec.dims = dims;
  spec.seed = seed;
  return reference::make_problem(spec);
}

::testing::AssertionResult kernel_within_tolerance(const reference::Problem& p, int threads = 1) {
  return testing::row_passes(
      reference::compare("edge", reference::make_oracle(p),
                         reference::run_kernel(p, {MemoryLayout::kBSHD, threads, true})));
}

// Queries placed before every key under a causal mask (and queries of a document no key belongs
// to) see nothing: lse = -inf, out = 0, dq = 0, and they add nothing to dk/dv.
TEST(KernelEdge, FullyMaskedRows) {
  for (const bool docs : {false, true}) {
    reference::Problem p = random_problem({2, 6, 130, 2, 1, 16, 16}, 5);
    p.params.causal = true;
    p.params.dropout_p = 0.1f;
    p.q_pos = {0, 1, 500, 200, 2, 399};
    for (int64_t j = 0; j < 130; ++j) p.k_pos[j] = 3 + 3 * j;
    if (docs) {
      p.q_doc = {0, 0, 1, 2, 0, 1};  // document 2 has no keys
      p.k_doc.assign(130, 1);
      p.k_doc[0] = 0;  // position 3: still after queries 0, 1, 4 -> hidden by causality
    }
    const reference::Outputs got = reference::run_kernel(p, {MemoryLayout::kBSHD, 2, true});
    const std::vector<int64_t> empty =
        docs ? std::vector<int64_t>{0, 1, 3, 4} : std::vector<int64_t>{0, 1, 4};
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i : empty) {
          EXPECT_EQ(got.lse[(b * 2 + h) * 6 + i], kNegInf) << "row " << i;
          for (int64_t e = 0; e < 16; ++e) {
            EXPECT_EQ(got.out[((b * 6 + i) * 2 + h) * 16 + e], 0.0);
            EXPECT_EQ(got.dq[((b * 6 + i) * 2 + h) * 16 + e], 0.0);
          }
        }
    EXPECT_TRUE(kernel_within_tolerance(p)) << (docs ? "with documents" : "causal");
  }
}

// Each query sees a handful of keys that sit in one tile far from the others, so most tiles of its
// row are hidden and one is partial.
TEST(KernelEdge, RowsVisibleInSomeTilesOnly) {
  reference::Problem p = random_problem({1, 9, 1025, 2, 2, 40, 40}, 6);
  p.params.window_left = 3;
  p.params.window_right = 2;
  p.params.dropout_p = 0.1f;
  p.q_pos = {0, 1024, 512, 700, 63, 64, 65, 2000, 1};
  for (int64_t j = 0; j < 1025; ++j) p.k_pos[j] = j;
  EXPECT_TRUE(kernel_within_tolerance(p, 2));
}

TEST(KernelEdge, EmptyKeySequence) {
  const reference::Problem p = random_problem({2, 5, 0, 2, 1, 8, 8}, 7);
  testing::ProblemTensors t(p);
  Tensor out = t.new_out(), dq = t.new_like_q(), dk = t.new_like_k(), dv = t.new_like_v();
  for (float& e : out.span()) e = 7.0f;
  for (float& e : dq.span()) e = 7.0f;
  std::vector<float> lse = t.new_lse();
  attention_kernel_forward(t.inputs, p.params, p.rng, out.view(), lse);
  for (float e : out.span()) EXPECT_EQ(e, 0.0f);
  for (float e : lse) EXPECT_EQ(e, -std::numeric_limits<float>::infinity());
  attention_kernel_backward(t.inputs, p.params, p.rng, t.dout.view(), out.view(), lse, dq.view(),
                            dk.view(), dv.view());
  for (float e : dq.span()) EXPECT_EQ(e, 0.0f);
}

TEST(KernelEdge, EmptyQuerySequence) {
  const reference::Problem p = random_problem({2, 0, 9, 2, 1, 8, 8}, 8);
  testing::ProblemTensors t(p);
  Tensor out = t.new_out(), dq = t.new_like_q(), dk = t.new_like_k(), dv = t.new_like_v();
  std::vector<float> lse = t.new_lse();
  attention_kernel_forward(t.inputs, p.params, p.rng, out.view(), lse);
  for (float& e : dk.span()) e = 7.0f;
  for (float& e : dv.span()) e = 7.0f;
  BackwardOptions accumulate;
  accumulate.accumulate = true;
  attention_kernel_backward(t.inputs, p.params, p.rng, t.dout.view(), out.view(), lse, dq.view(),
                            dk.view(), dv.view(), accumulate);
  for (float e : dk.span()) EXPECT_EQ(e, 7.0f);  // nothing added
  attention_kernel_backward(t.inputs, p.params, p.rng, t.dout.view(), out.view(), lse, dq.view(),
                            dk.view(), dv.view());
  for (float e : dk.span()) EXPECT_EQ(e, 0.0f);  // overwritten with the (empty) sum
  for (float e : dv.span()) EXPECT_EQ(e, 0.0f);
}

TEST(KernelEdge, EmptyBatch) {
  const reference::Problem p = random_problem({0, 5, 9, 4, 2, 8, 8}, 9);
  EXPECT_TRUE(kernel_within_tolerance(p));
}

// window_left = window_right = 0: each query sees only the key at its own position, so out_i is
// exactly that key's v and lse_i its score.
TEST(KernelEdge, ZeroWidthWindow) {
  reference::Problem p = random_problem({1, 97, 97, 2, 1, 16, 8}, 10);
  p.params.window_left = 0;
  p.params.window_right = 0;
  const reference::Outputs got = reference::run_kernel(p, {MemoryLayout::kBSHD, 1, true});
  const reference::Outputs exact = reference::attention(p);
  for (int64_t i = 0; i < 97; ++i)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t e = 0; e < 8; ++e) {
        EXPECT_NEAR(got.out[(i * 2 + h) * 8 + e], p.v[i * 8 + e], 1e-6);
      }
  EXPECT_LT(testing::relative_error(got.lse, exact.lse), 1e-6);
  EXPECT_TRUE(kernel_within_tolerance(p));
}

// document_of puts positions 0 and 1034 in one-token documents: those rows see only themselves.
TEST(KernelEdge, OneTokenDocuments) {
  reference::Problem p = random_problem({1, 60, 60, 1, 1, 8, 8}, 11);
  p.params.causal = true;
  p.params.dropout_p = 0.1f;
  for (int64_t i = 0; i < 60; ++i) p.q_pos[i] = p.k_pos[i] = 1004 + i;  // covers 1034 and 1039
  for (int64_t x : p.q_pos) p.q_doc.push_back(reference::document_of(x));
  p.k_doc = p.q_doc;
  ASSERT_NE(reference::document_of(1033), reference::document_of(1034));
  ASSERT_NE(reference::document_of(1034), reference::document_of(1035));
  const reference::Outputs got = reference::run_kernel(p, {MemoryLayout::kBSHD, 1, true});
  const int64_t row = 1034 - 1004;
  const bool kept = reference::dropout_keep(p.rng, 0, 0, 1, 1034, 1034, 0.1f);
  for (int64_t e = 0; e < 8; ++e) {
    EXPECT_NEAR(got.out[row * 8 + e], kept ? p.v[row * 8 + e] / 0.9 : 0.0, 1e-5);
  }
  EXPECT_TRUE(kernel_within_tolerance(p));
}

// Masks compare int64 positions: beyond 2^32 nothing may wrap.
TEST(KernelEdge, PositionsBeyond32Bits) {
  reference::Problem p = random_problem({1, 97, 97, 2, 1, 16, 16}, 12);
  p.params.causal = true;
  p.params.window_left = 40;
  p.params.dropout_p = 0.1f;
  for (int64_t i = 0; i < 97; ++i) {
    p.q_pos[i] = (int64_t{1} << 32) - 50 + i;  // straddles 2^32
    p.k_pos[i] = (int64_t{1} << 32) - 60 + i;
  }
  EXPECT_TRUE(kernel_within_tolerance(p));
}

// The forward of `p` on every ISA path the CPU runs, each checked against the double reference
// (forward only); `check(got, isa)` may check more of each result.
template <class Check>
void forward_on_every_isa(const reference::Problem& p, const std::string& what, Check&& check) {
  const reference::Oracle oracle = reference::make_oracle(p, false);
  for (Isa isa : available_isas()) {
    const reference::Outputs got =
        reference::run_kernel(p, {MemoryLayout::kBSHD, 1, false, isa, DType::kF32});
    EXPECT_TRUE(testing::row_passes(reference::compare(what, oracle, got)))
        << what << ", " << isa_name(isa);
    check(got, isa);
  }
}
void forward_on_every_isa(const reference::Problem& p, const std::string& what) {
  forward_on_every_isa(p, what, [](const reference::Outputs&, Isa) {});
}

// The forward's softmax keeps scores, max and lse in natural units and multiplies by log2 e only
// s - max (its 2^x exp): integer q and k with a power-of-two scale make every fp32 score exact,
// and the forward must keep that (scores pre-multiplied by log2 e rounded each one relative to
// |s| and missed the rule 14x here; docs/performance.md).
TEST(KernelEdge, ExactScoresStayExact) {
  for (const int magnitude : {16, 64}) {
    reference::Problem p = random_problem({1, 64, 256, 1, 1, 16, 16}, 3);
    uint64_t state = 7;
    const auto next_int = [&] {  // a 64-bit LCG's high bits, uniform enough in [-m, m]
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<double>(static_cast<int64_t>((state >> 33) % (2 * magnitude + 1)) -
                                 magnitude);
    };
    for (double& x : p.q) x = next_int();
    for (double& x : p.k) x = next_int();
    p.params.softmax_scale = 0.25f;
    forward_on_every_isa(p, "integer scores up to " + std::to_string(magnitude));
  }
}

// Finite sinks, scales and scores near the float range: nothing may overflow to a NaN (with
// their logits times log2 e, a sink above FLT_MAX / log2 e did). Rows before every key (causal,
// Sq > Sk) get out 0 and exactly the sink as lse.
TEST(KernelEdge, SinksScalesAndScoresNearTheFloatRange) {
  for (const float sink : {3e38f, -3e38f, std::numeric_limits<float>::max()}) {
    reference::Problem p = random_problem({1, 40, 17, 1, 1, 8, 8}, 5);
    p.params.causal = true;
    p.params.sink = {sink};
    forward_on_every_isa(p, "sink " + std::to_string(sink), [&](const auto& got, Isa isa) {
      for (int64_t i = 0; i < 23; ++i) {  // the rows that see no key
        EXPECT_EQ(got.lse[static_cast<size_t>(i)], static_cast<double>(sink)) << i;
        for (int64_t e = 0; e < 8; ++e) EXPECT_EQ(got.out[static_cast<size_t>(i * 8 + e)], 0.0);
      }
      for (double x : got.out) EXPECT_FALSE(std::isnan(x)) << sink << ", " << isa_name(isa);
      for (double x : got.lse) EXPECT_FALSE(std::isnan(x)) << sink << ", " << isa_name(isa);
    });
  }
  // A scale of 3e38 on zero queries (every score 0: out is the mean of v), and one score of 3e38
  // itself (D = 1: q = 1e19, k = 3e19).
  for (const bool huge_score : {false, true}) {
    reference::Problem p = random_problem({1, 4, 5, 1, 1, huge_score ? 1 : 8, 4}, 2);
    for (double& x : p.q) x = huge_score ? 1e19 : 0.0;
    if (huge_score) {
      for (size_t j = 0; j < p.k.size(); ++j) {
        p.k[j] = j == 0 ? 3e19 : 1e18 * static_cast<double>(j);
      }
    } else {
      p.params.softmax_scale = 3e38f;
    }
    forward_on_every_isa(p, huge_score ? "score 3e38" : "scale 3e38");
  }
}

}  // namespace
}  // namespace cpattn
