// The document-aware ring (RingOptions::document_aware): with packed documents, windows or causal
// masks on a contiguous layout, k/v blocks travel only as far as the last rank that needs them
// and dk/dv accumulators return straight home. Fewer bytes than the plain ring, bitwise the same
// results, and the plain ring's byte count is what RingStats::bytes_sent_plain_ring reports.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cp/ring_harness.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::MaskKind;

// Packed documents of the given lengths (ids 0, 1, ...), GQA 4/2, Dqk 16, Dv 8.
reference::Problem packed(const std::vector<int64_t>& lengths, bool causal, float dropout,
                          uint64_t seed) {
  const int64_t S = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  reference::CaseSpec s;
  s.mask = MaskKind::kDocs;
  s.dims = {1, S, S, 4, 2, 16, 8};
  s.dropout_p = dropout;
  s.seed = seed;
  reference::Problem p = reference::make_problem(s);
  p.params.causal = causal;
  p.q_doc.clear();
  for (size_t d = 0; d < lengths.size(); ++d) p.q_doc.insert(p.q_doc.end(), lengths[d], d);
  p.k_doc = p.q_doc;
  return p;
}

struct Traffic {
  reference::Outputs out;
  int64_t bytes = 0, plain = 0;  // summed over the ranks
};

Traffic run(const reference::Problem& p, int P, Layout layout, bool document_aware) {
  std::vector<RingStats> stats(static_cast<size_t>(P));
  RingRun r{P, layout};
  r.document_aware = document_aware;
  r.stats = stats;
  Traffic t{run_ring(p, r)};
  for (const RingStats& s : stats) {
    t.bytes += s.bytes_sent;
    t.plain += s.bytes_sent_plain_ring;
  }
  return t;
}

// The case: documents [300, 5, 700, 19] at P = 4, forward and backward.
TEST(DocumentRing, PackedDocumentsSendLessAndGiveTheSameBits) {
  for (const bool causal : {false, true}) {
    for (const float dropout : {0.0f, 0.1f}) {
      SCOPED_TRACE(::testing::Message() << "causal " << causal << " dropout " << dropout);
      const reference::Problem p = packed({300, 5, 700, 19}, causal, dropout, 91);
      const Traffic aware = run(p, 4, Layout::kContiguous, true);
      const Traffic plain = run(p, 4, Layout::kContiguous, false);
      EXPECT_LT(aware.bytes, plain.bytes);
      EXPECT_EQ(plain.bytes, plain.plain);
      EXPECT_EQ(aware.plain, plain.plain);
      EXPECT_TRUE(outputs_bitwise_equal(aware.out, plain.out));
      EXPECT_TRUE(row_passes(reference::compare("docs", reference::make_oracle(p), aware.out)));
    }
  }
}

// Many short documents at P = 8 (mean length S / 16): the relay stops after about one hop.
TEST(DocumentRing, ShortDocumentsAtP8SendAFractionOfThePlainRing) {
  std::vector<int64_t> lengths;
  for (int d = 0; d < 16; ++d) lengths.push_back(32 + (d * 37) % 64);  // mean 64, S = 1032
  const reference::Problem p = packed(lengths, true, 0.0f, 93);
  const Traffic aware = run(p, 8, Layout::kContiguous, true);
  const Traffic plain = run(p, 8, Layout::kContiguous, false);
  EXPECT_TRUE(outputs_bitwise_equal(aware.out, plain.out));
  EXPECT_LE(static_cast<double>(aware.bytes), 0.3 * static_cast<double>(plain.bytes))
      << aware.bytes << " of " << plain.bytes;
}

// Whatever the layout and mask, pruning never changes a bit and never sends more.
TEST(DocumentRing, EveryLayoutAndMaskGivesTheSameBits) {
  for (const MaskKind mask : {MaskKind::kCausal, MaskKind::kWindow, MaskKind::kDocsCausal}) {
    reference::CaseSpec s;
    s.mask = mask;
    s.dims = {1, 301, 301, 2, 1, 16, 16};
    s.dropout_p = 0.1f;
    s.seed = 95;
    const reference::Problem p = reference::make_problem(s);
    for (const Layout layout : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
      for (const int P : {3, 8}) {
        SCOPED_TRACE(::testing::Message() << reference::mask_kind_name(mask) << " "
                                          << layout_name(layout) << " cp" << P);
        const Traffic aware = run(p, P, layout, true);
        const Traffic plain = run(p, P, layout, false);
        EXPECT_TRUE(outputs_bitwise_equal(aware.out, plain.out));
        EXPECT_LE(aware.bytes, plain.bytes);
        // Causal masks on contiguous shards: later blocks are needed by fewer ranks. (The
        // two-sided window needs every block at the rank before its home, the end of its path.)
        if (layout == Layout::kContiguous && p.params.causal) {
          EXPECT_LT(aware.bytes, plain.bytes);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
