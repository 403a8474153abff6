// Varlen calls in flash-attn's convention (cpattn/varlen.h, docs/design.md section 1.2) on one
// rank: the positions and document ids of cu_seqlens against a hand-built table, bottom-right
// causal and window alignment when Lq != Lk against hand-built masks, the kernel on packed
// documents against each document run alone (no dropout) and against the float64 reference
// (with dropout), and every bad cu_seqlens refused with an error that names it.
#include "cpattn/varlen.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/mask.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;
using Ids = std::vector<int64_t>;

Ids cumulative(const Ids& lengths) {
  Ids cu{0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

TEST(VarlenTokens, MatchesHandBuiltPositionsAndDocuments) {
  // Documents (Lq, Lk): (2, 3), (0, 1), (3, 1). Spans 3, 1, 3; bases 0, 3, 4.
  const Ids cu_q{0, 2, 2, 5}, cu_k{0, 3, 4, 5};
  const VarlenTokens t = varlen_tokens(cu_q, cu_k, 5, 5);
  EXPECT_EQ(t.q_pos, (Ids{1, 2, 4, 5, 6}));
  EXPECT_EQ(t.k_pos, (Ids{0, 1, 2, 3, 6}));
  EXPECT_EQ(t.q_doc, (Ids{0, 0, 2, 2, 2}));
  EXPECT_EQ(t.k_doc, (Ids{0, 0, 0, 1, 2}));
}

TEST(VarlenTokens, SelfAttentionPositionsAreTheTokenIndices) {
  const Ids cu = cumulative({1, 7, 300, 0, 5, 1025});
  const VarlenTokens t = varlen_tokens(cu, cu, cu.back(), cu.back());
  Ids index(static_cast<size_t>(cu.back()));
  std::iota(index.begin(), index.end(), int64_t{0});
  EXPECT_EQ(t.q_pos, index);
  EXPECT_EQ(t.k_pos, index);
  EXPECT_EQ(t.q_doc, t.k_doc);
  EXPECT_EQ(t.q_doc[0], 0);
  EXPECT_EQ(t.q_doc[1], 1);
  EXPECT_EQ(t.q_doc.back(), 5);  // document 3 is empty: ids are the documents' indices
  const VarlenTokens none = varlen_tokens(Ids{0}, Ids{0}, 0, 0);
  EXPECT_TRUE(none.q_pos.empty() && none.k_doc.empty());
}

// flash-attn's bottom-right alignment: within a document of Lq queries and Lk keys, key j is
// visible to query i iff j <= i + Lk - Lq (causal), and i + Lk - Lq - left <= j <= i + Lk - Lq +
// right (window); documents never see each other.
TEST(VarlenTokens, CausalAndWindowsAlignBottomRight) {
  const Ids lq{2, 5, 3, 1, 4}, lk{5, 2, 3, 0, 9};
  const Ids cu_q = cumulative(lq), cu_k = cumulative(lk);
  const VarlenTokens t = varlen_tokens(cu_q, cu_k, cu_q.back(), cu_k.back());
  struct Mask {
    bool causal;
    int64_t left, right;
  };
  for (const Mask m : {Mask{true, -1, -1}, Mask{false, 2, 1}, Mask{true, 1, -1}, Mask{false, 0, 0},
                       Mask{false, -1, -1}}) {
    AttentionParams params;
    params.causal = m.causal;
    params.window_left = m.left;
    params.window_right = m.right;
    const MaskRule rule(params, true);
    for (size_t qd = 0; qd < lq.size(); ++qd) {
      for (int64_t i = 0; i < lq[qd]; ++i) {
        for (size_t kd = 0; kd < lk.size(); ++kd) {
          for (int64_t j = 0; j < lk[kd]; ++j) {
            const int64_t diag = i + lk[kd] - lq[kd];
            bool want = qd == kd;
            want = want && (!m.causal || j <= diag);
            want = want && (m.left < 0 || j >= diag - m.left);
            want = want && (m.right < 0 || j <= diag + m.right);
            const size_t a = static_cast<size_t>(cu_q[qd] + i);
            const size_t b = static_cast<size_t>(cu_k[kd] + j);
            EXPECT_EQ(rule.visible(t.q_pos[a], t.k_pos[b], t.q_doc[a], t.k_doc[b]), want)
                << "query " << i << " of document " << qd << ", key " << j << " of document " << kd
                << ", causal " << m.causal << " window " << m.left << "," << m.right;
          }
        }
      }
    }
  }
}

TEST(VarlenTokens, RefusesBadCumulativeLengthsNamingThem) {
  struct Bad {
    Ids cu_q, cu_k;
    int64_t total_q, total_k;
    ErrorCode code;
    const char* says;
  };
  const std::vector<Bad> cases = {
      {{1, 3, 5},
       {0, 3, 5},
       5,
       5,
       ErrorCode::kInvalidArgument,
       "cu_seqlens_q must start at 0, got 1"},
      {{0, 3, 5},
       {0, 4, 2},
       5,
       2,
       ErrorCode::kInvalidArgument,
       "cu_seqlens_k must be non-decreasing, got 4 then 2 at entries 1 and 2"},
      {{0, 100, 300},
       {0, 100, 300},
       301,
       300,
       ErrorCode::kShapeMismatch,
       "cu_seqlens_q ends at 300 but q has 301 tokens"},
      {{0, 100, 300},
       {0, 100, 299},
       300,
       300,
       ErrorCode::kShapeMismatch,
       "cu_seqlens_k ends at 299 but k has 300 tokens"},
      {{0, 2, 5},
       {0, 5},
       5,
       5,
       ErrorCode::kInvalidArgument,
       "cu_seqlens_q lists 2 documents but cu_seqlens_k 1"},
      {{}, {0}, 0, 0, ErrorCode::kInvalidArgument, "cu_seqlens_q must hold D + 1"},
  };
  for (const Bad& b : cases) {
    const Error e = error_of([&] { varlen_tokens(b.cu_q, b.cu_k, b.total_q, b.total_k); });
    EXPECT_EQ(e.code(), b.code) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(b.says));
  }
}

struct VarlenCase {
  std::string name;
  Ids lq, lk;
  reference::MaskKind mask;
  int64_t Hq, Hkv;
};

reference::CaseSpec varlen_spec(const VarlenCase& c, float dropout_p, uint64_t seed) {
  reference::CaseSpec s;
  s.mask = c.mask;
  s.dims = {1, 0, 0, c.Hq, c.Hkv, 24, 16};
  s.dropout_p = dropout_p;
  s.seed = seed;
  return s;
}

// Random document lengths in [0, longest], n documents; Lk = Lq unless cross.
Ids random_lengths(size_t n, int64_t longest, uint64_t seed) {
  std::mt19937_64 gen(seed);
  Ids l(n);
  for (int64_t& x : l) x = static_cast<int64_t>(gen() % static_cast<uint64_t>(longest + 1));
  return l;
}

std::vector<VarlenCase> varlen_cases() {
  using reference::MaskKind;
  const Ids issue{1, 7, 300, 0, 5, 1025};
  return {
      {"issue_full_GQA4x2", issue, issue, MaskKind::kNone, 4, 2},
      {"issue_causal_MHA2", issue, issue, MaskKind::kCausal, 2, 2},
      {"issue_causal_window_MQA4", issue, issue, MaskKind::kCausalWindow, 4, 1},
      {"issue_window_GQA4x2", issue, issue, MaskKind::kWindow, 4, 2},
      {"cross_causal_GQA4x2", {5, 0, 8, 1, 40, 3}, {9, 2, 1, 0, 17, 3}, MaskKind::kCausal, 4, 2},
      {"cross_window_MHA2", {5, 0, 8, 1, 40, 3}, {9, 2, 1, 0, 17, 3}, MaskKind::kWindow, 2, 2},
      {"random_causal_GQA4x2", random_lengths(20, 60, 5), random_lengths(20, 60, 5),
       MaskKind::kCausal, 4, 2},
      {"random_cross_full_GQA4x1", random_lengths(12, 40, 6), random_lengths(12, 40, 7),
       MaskKind::kNone, 4, 1},
  };
}

// The whole packed call equals each document run alone (its own one-document varlen call),
// forward and backward, within the project's accuracy rule: both are judged against the float64
// reference, and they differ from each other by less than 1e-5 of the largest magnitude.
TEST(VarlenKernel, PackedDocumentsEqualEachDocumentAlone) {
  uint64_t seed = 300;
  for (const VarlenCase& c : varlen_cases()) {
    SCOPED_TRACE(c.name);
    const Ids cu_q = cumulative(c.lq), cu_k = cumulative(c.lk);
    const reference::Problem p =
        reference::make_varlen_problem(varlen_spec(c, 0.0f, ++seed), cu_q, cu_k);
    const reference::KernelRun run;
    const reference::Outputs whole = reference::run_kernel(p, run);
    const reference::Outputs alone = reference::run_kernel_per_document(p, cu_q, cu_k, run);
    EXPECT_TRUE(outputs_near(whole, alone, 1e-5));
    EXPECT_TRUE(row_passes(reference::compare(c.name, reference::make_oracle(p), whole)));
  }
}

// With dropout every document draws the masks of its own global positions (disjoint from the
// other documents'): the packed call against the float64 reference with the same positions.
TEST(VarlenKernel, DropoutMatchesTheReferenceWithTheSamePositions) {
  uint64_t seed = 400;
  for (const VarlenCase& c : varlen_cases()) {
    SCOPED_TRACE(c.name);
    const Ids cu_q = cumulative(c.lq), cu_k = cumulative(c.lk);
    const reference::Problem p =
        reference::make_varlen_problem(varlen_spec(c, 0.2f, ++seed), cu_q, cu_k);
    const reference::Outputs got = reference::run_kernel(p, {});
    EXPECT_TRUE(row_passes(reference::compare(c.name, reference::make_oracle(p), got)));
  }
}

// Positions of different documents never repeat, so no two documents share a dropout stream.
TEST(VarlenKernel, DocumentsHaveDisjointPositions) {
  const Ids cu_q = cumulative({4, 0, 9, 2}), cu_k = cumulative({7, 3, 1, 2});
  const VarlenTokens t = varlen_tokens(cu_q, cu_k, cu_q.back(), cu_k.back());
  for (size_t a = 0; a < t.k_pos.size(); ++a) {
    for (size_t b = 0; b < t.q_pos.size(); ++b) {
      if (t.q_doc[b] != t.k_doc[a]) {
        EXPECT_NE(t.q_pos[b], t.k_pos[a]);
      }
    }
    for (size_t b = a + 1; b < t.k_pos.size(); ++b) EXPECT_NE(t.k_pos[a], t.k_pos[b]);
  }
}

}  // namespace
}  // namespace cpattn::testing
