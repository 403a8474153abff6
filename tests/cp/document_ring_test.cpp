// The document-aware ring (CpOptions::document_aware): with packed documents, windows or causal
// masks on a contiguous layout, k/v blocks travel only as far as the last rank that needs them
// and dk/dv accumulators return straight home, or (RelayPlan::direct) go straight from their home
// to the few ranks that need them, whose dk/dv shares come straight back. Fewer bytes than the
// plain ring, bitwise the same results, and the plain ring's byte count is what
// CpStats::bytes_sent_plain_ring reports.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cp/ring_detail.h"
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
  std::vector<CpStats> stats(static_cast<size_t>(P));
  RingRun r{P, layout};
  r.document_aware = document_aware;
  r.stats = stats;
  Traffic t{run_ring(p, r)};
  for (const CpStats& s : stats) {
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

// The routing every rank derives for shards of `p` over P ranks.
detail::RelayPlan plan_of(const reference::Problem& p, int P, Layout layout = Layout::kContiguous) {
  SequenceSharding seq = SequenceSharding::of(layout, p.dims.Sq, P, 0);
  seq.docs = p.q_doc;
  const detail::BlockTable table = detail::BlockTable::of(seq);
  return detail::RelayPlan(p.params, table, table, true);
}

// Many short documents at P = 8 (mean length S / 16). Causal: a block is needed by the next rank
// only, one hop. Bidirectional: also by the rank before it, the end of the ring's path, so the
// block goes straight there and to the next rank instead.
TEST(DocumentRing, ShortDocumentsAtP8SendAFractionOfThePlainRing) {
  std::vector<int64_t> lengths;
  for (int d = 0; d < 16; ++d) lengths.push_back(32 + (d * 37) % 64);  // mean 61.5, S = 984
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    const reference::Problem p = packed(lengths, causal, 0.0f, 93);
    const Traffic aware = run(p, 8, Layout::kContiguous, true);
    const Traffic plain = run(p, 8, Layout::kContiguous, false);
    EXPECT_TRUE(outputs_bitwise_equal(aware.out, plain.out));
    EXPECT_LE(static_cast<double>(aware.bytes), 0.3 * static_cast<double>(plain.bytes))
        << aware.bytes << " of " << plain.bytes;
    const detail::RelayPlan plan = plan_of(p, 8);
    for (int b = 0; b < 8; ++b) {
      // Block 7 has no next rank; block 0 no rank before it.
      EXPECT_EQ(plan.direct(b), !causal && b != 0) << "block " << b;
    }
  }
}

// Direct and relayed blocks in one call, with dropout and GQA: a document spanning ranks 1-4 makes
// block 1 needed by four ranks (relayed), the short ones around it give direct blocks.
TEST(DocumentRing, DirectAndRelayedBlocksInOneCallGiveTheSameBits) {
  const std::vector<int64_t> lengths = {100, 40, 560, 30, 90, 80, 50, 8, 42};  // S = 1000, P = 8
  const reference::Problem p = packed(lengths, false, 0.1f, 97);
  const detail::RelayPlan plan = plan_of(p, 8);
  int direct = 0;
  for (int b = 0; b < 8; ++b) direct += plan.direct(b) ? 1 : 0;
  EXPECT_GT(direct, 0);
  EXPECT_LT(direct, 8);
  for (const Layout layout : {Layout::kContiguous, Layout::kZigzag}) {
    SCOPED_TRACE(layout_name(layout));
    const Traffic aware = run(p, 8, layout, true);
    const Traffic plain = run(p, 8, layout, false);
    EXPECT_TRUE(outputs_bitwise_equal(aware.out, plain.out));
    EXPECT_LE(aware.bytes, plain.bytes);
    EXPECT_TRUE(row_passes(reference::compare("docs", reference::make_oracle(p), aware.out)));
  }
}

// A direct block's dk/dv is its home's share plus the returned shares, added in ring order: the
// same sum as the relayed accumulator, bit for bit, for any documents, mask and group size.
RC_GTEST_PROP(DocumentRing, AnyDocumentsGiveThePlainRingsBits, ()) {
  const int P = *rc::gen::inRange(2, 9);
  const int64_t longest = *rc::gen::inRange<int64_t>(1, 90);
  const auto lengths = *rc::gen::container<std::vector<int64_t>>(
      *rc::gen::inRange<size_t>(1, 24), rc::gen::inRange<int64_t>(1, longest + 1));
  // Bidirectional documents on contiguous shards, where blocks go direct, more often than not.
  const bool causal = *rc::gen::element(false, false, true);
  const Layout layout = *rc::gen::element(Layout::kContiguous, Layout::kContiguous, Layout::kZigzag,
                                          Layout::kStriped);
  const reference::Problem p =
      packed(lengths, causal, *rc::gen::element(0.0f, 0.1f), *rc::gen::inRange<uint64_t>(1, 1000));
  const detail::RelayPlan plan = plan_of(p, P, layout);
  bool direct = false;
  for (int b = 0; b < P; ++b) direct = direct || plan.direct(b);
  RC_TAG(direct ? "some blocks direct" : "all relayed");
  const Traffic aware = run(p, P, layout, true);
  const Traffic plain = run(p, P, layout, false);
  RC_ASSERT(outputs_bitwise_equal(aware.out, plain.out));
  RC_ASSERT(aware.bytes <= plain.bytes);
}

// A sequence of S tokens whose mask is given as slices (no document ids), with sinks and
// dropout, GQA 4/2, Dqk 16, Dv 8.
reference::Problem sliced(int64_t S, std::vector<MaskSlice> slices, uint64_t seed) {
  reference::CaseSpec s;
  s.dims = {1, S, S, 4, 2, 16, 8};
  s.dropout_p = 0.1f;
  s.sink = true;
  s.seed = seed;
  reference::Problem p = reference::make_problem(s);
  p.params.slices = std::move(slices);
  return p;
}

// Mask slices (AttentionParams::slices) reach the routing through the block skip's runs: with a
// prefix-LM mask at a short prefix, documents as causal slices, and shared-prefix packing (each
// document sees a common prefix and itself), the ring sends fewer bytes than the plain ring on
// contiguous shards and, where some rank's two zigzag runs both miss a block, on zigzag shards
// too; the same bits either way, within the accuracy rule. A prefix-LM mask over the whole
// sequence on zigzag shards cannot save anything: every rank's late chunk sees every earlier key,
// so every rank needs every block (the plan says so, and the bytes are the plain ring's).
TEST(DocumentRing, MaskSlicesSendLessThanThePlainRing) {
  const int64_t S = 1024;
  std::vector<int64_t> lengths;
  for (int d = 0; d < 20; ++d) lengths.push_back(30 + (d * 29) % 45);  // 30..74, S = 1024 below
  int64_t used = 0;
  for (const int64_t l : lengths) used += l;
  lengths.push_back(S - used);
  std::vector<MaskSlice> documents, shared_prefix;
  const int64_t prefix = 32;
  shared_prefix.push_back({0, prefix, 0, prefix, SliceType::kCausal});
  for (int64_t a = 0, d = 0; a < S; a += lengths[static_cast<size_t>(d++)]) {
    const int64_t b = a + lengths[static_cast<size_t>(d)];
    documents.push_back({a, b, a, b, SliceType::kCausal});
    const int64_t from = std::max(a, prefix);
    if (from >= b) continue;
    shared_prefix.push_back({from, b, 0, prefix, SliceType::kFull});
    shared_prefix.push_back({from, b, from, b, SliceType::kCausal});
  }
  const std::vector<MaskSlice> prefix_lm = {{0, S, 0, 40, SliceType::kFull},
                                            {40, S, 40, S, SliceType::kCausal}};
  const std::vector<std::pair<const char*, std::vector<MaskSlice>>> masks = {
      {"prefix-LM", prefix_lm}, {"documents", documents}, {"shared prefix", shared_prefix}};
  uint64_t seed = 120;
  for (const auto& [name, slices] : masks) {
    const reference::Problem p = sliced(S, slices, seed++);
    const reference::Oracle oracle = reference::make_oracle(p);
    for (const Layout layout : {Layout::kContiguous, Layout::kZigzag}) {
      for (const int P : {4, 8}) {
        SCOPED_TRACE(::testing::Message() << name << " " << layout_name(layout) << " cp" << P);
        const Traffic aware = run(p, P, layout, true);
        const Traffic plain = run(p, P, layout, false);
        EXPECT_TRUE(outputs_bitwise_equal(aware.out, plain.out));
        EXPECT_EQ(plain.bytes, plain.plain);
        EXPECT_EQ(aware.plain, plain.plain);
        if (layout == Layout::kZigzag && name == std::string("prefix-LM")) {
          const detail::RelayPlan plan = plan_of(p, P, layout);
          for (int r = 0; r < P; ++r) {
            for (int b = 0; b < P; ++b) EXPECT_TRUE(plan.needs(r, b)) << r << " " << b;
          }
          EXPECT_EQ(aware.bytes, plain.bytes);
        } else {
          EXPECT_LT(aware.bytes, plain.bytes) << aware.bytes << " of " << plain.bytes;
        }
        if (P == 4) {
          EXPECT_TRUE(row_passes(reference::compare(name, oracle, aware.out)));
        }
      }
    }
  }
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
