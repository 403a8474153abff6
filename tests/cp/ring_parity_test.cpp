// Ring vs the double reference: gathered out/lse/dq/dk/dv of P in-process ranks within the kernel's
// tolerance rule, on every ISA path, over a case list that covers every P, layout, mask, dropout,
// head and size value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/isa.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::CaseSpec;
using reference::Dims;
using reference::MaskKind;
using MemL = MemoryLayout;

struct RingCase {
  int cp_size;
  Layout layout;
  CaseSpec spec;  // Sq == Sk == S; positions 0..S-1 (PositionKind::kContiguous)
};

std::string ring_case_name(const RingCase& c) {
  return reference::case_name(c.spec) + "_" + layout_name(c.layout) + "_cp" +
         std::to_string(c.cp_size);
}

CaseSpec spec(MaskKind mask, int64_t S, int64_t hq, int64_t hkv, int64_t dqk, int64_t dv,
              float dropout, MemL layout, uint64_t seed, int64_t batch = 1) {
  CaseSpec s;
  s.mask = mask;
  s.dims = Dims{batch, S, S, hq, hkv, dqk, dv};
  s.dropout_p = dropout;
  s.layout = layout;
  s.seed = seed;
  return s;
}

// Every value appears at least once: P {1,2,3,4,8}; layouts; masks none/causal/window/
// causal+window/docs/docs+causal (document_of packs documents of length 1, 5, 23, 120, ... so
// some have length 1 and many span ranks); dropout {0, 0.1}; MHA, GQA (8, 2), MQA; Dqk 192 /
// Dv 128; S {1, 3, 97, 1025, 4096} (S < 2P leaves ranks empty); BSHD/BHSD/SBHD inputs.
const std::vector<RingCase> kCases = {
    {1, Layout::kZigzag, spec(MaskKind::kCausal, 97, 8, 2, 16, 16, 0.1f, MemL::kBSHD, 1)},
    {2, Layout::kContiguous, spec(MaskKind::kNone, 97, 2, 2, 32, 32, 0.0f, MemL::kBSHD, 2)},
    {2, Layout::kZigzag, spec(MaskKind::kCausal, 97, 2, 1, 192, 128, 0.0f, MemL::kBSHD, 3)},
    {2, Layout::kStriped, spec(MaskKind::kDocs, 1025, 2, 2, 16, 16, 0.0f, MemL::kSBHD, 4)},
    {2, Layout::kZigzag, spec(MaskKind::kCausal, 1, 2, 1, 8, 8, 0.0f, MemL::kBSHD, 5)},
    {3, Layout::kZigzag, spec(MaskKind::kCausal, 97, 8, 2, 16, 16, 0.1f, MemL::kBHSD, 6)},
    {3, Layout::kStriped, spec(MaskKind::kNone, 3, 2, 2, 8, 8, 0.1f, MemL::kBSHD, 7)},
    {3, Layout::kContiguous,
     spec(MaskKind::kCausalWindow, 1025, 2, 1, 16, 8, 0.0f, MemL::kBSHD, 8)},
    {4, Layout::kStriped, spec(MaskKind::kWindow, 97, 4, 1, 24, 24, 0.0f, MemL::kSBHD, 9)},
    {4, Layout::kContiguous, spec(MaskKind::kWindow, 97, 2, 2, 16, 16, 0.1f, MemL::kBSHD, 10)},
    {4, Layout::kZigzag, spec(MaskKind::kCausal, 1025, 8, 2, 16, 16, 0.1f, MemL::kBSHD, 11)},
    {4, Layout::kZigzag, spec(MaskKind::kCausal, 1, 1, 1, 8, 8, 0.0f, MemL::kBHSD, 12)},
    {4, Layout::kStriped, spec(MaskKind::kDocsCausal, 97, 2, 1, 16, 16, 0.1f, MemL::kBSHD, 13, 2)},
    {8, Layout::kZigzag, spec(MaskKind::kCausal, 97, 2, 1, 16, 16, 0.0f, MemL::kBSHD, 14)},
    {8, Layout::kStriped, spec(MaskKind::kDocsCausal, 97, 4, 1, 16, 16, 0.1f, MemL::kBHSD, 15)},
    {8, Layout::kContiguous, spec(MaskKind::kCausal, 3, 2, 2, 8, 8, 0.0f, MemL::kBSHD, 16)},
    {8, Layout::kZigzag, spec(MaskKind::kDocs, 1025, 2, 2, 8, 8, 0.1f, MemL::kBSHD, 17)},
    {8, Layout::kContiguous, spec(MaskKind::kCausalWindow, 97, 2, 2, 8, 8, 0.0f, MemL::kSBHD, 18)},
    {4, Layout::kZigzag, spec(MaskKind::kCausal, 4096, 2, 1, 8, 8, 0.0f, MemL::kBSHD, 19)},
    {8, Layout::kStriped, spec(MaskKind::kDocsCausal, 4096, 1, 1, 8, 8, 0.1f, MemL::kBSHD, 20)},
};

class RingParity : public ::testing::TestWithParam<RingCase> {};

// On every ISA path the CPU runs (the oracle is computed once per case).
TEST_P(RingParity, MatchesDoubleReference) {
  const RingCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  const reference::Oracle oracle = reference::make_oracle(p);
  for (Isa isa : available_isas()) {
    RingRun run{c.cp_size, c.layout, c.spec.layout};
    run.isa = isa;
    const reference::Outputs got = run_ring(p, run);
    EXPECT_TRUE(
        row_passes(reference::compare(ring_case_name(c) + " isa " + isa_name(isa), oracle, got)));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RingParity, ::testing::ValuesIn(kCases),
                         [](const auto& tp) { return ring_case_name(tp.param); });

// Splitting over more ranks adds merge roundings but must not grow the error beyond 2x of P = 1.
class RingErrorGrowth : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingErrorGrowth, Cp8ErrorAtMostTwiceCp1) {
  const RingCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  const reference::Outputs exact = reference::attention(p);
  const reference::Outputs one = run_ring(p, {1, c.layout, c.spec.layout});
  const reference::Outputs many = run_ring(p, {c.cp_size, c.layout, c.spec.layout});
  const std::array<const std::vector<double>*, 5> e = {&exact.out, &exact.lse, &exact.dq, &exact.dk,
                                                       &exact.dv};
  const std::array<const std::vector<double>*, 5> a = {&one.out, &one.lse, &one.dq, &one.dk,
                                                       &one.dv};
  const std::array<const std::vector<double>*, 5> b = {&many.out, &many.lse, &many.dq, &many.dk,
                                                       &many.dv};
  for (size_t t = 0; t < 5; ++t) {
    const double err1 = reference::max_abs_error(*e[t], *a[t]);
    const double err8 = reference::max_abs_error(*e[t], *b[t]);
    EXPECT_LE(err8, 2.0 * err1 + 1e-6) << reference::kTensorNames[t] << ": cp1 err " << err1
                                       << ", cp" << c.cp_size << " err " << err8;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RingErrorGrowth,
    ::testing::Values(RingCase{8, Layout::kZigzag,
                               spec(MaskKind::kCausal, 1025, 4, 2, 32, 32, 0.1f, MemL::kBSHD, 31)},
                      RingCase{8, Layout::kStriped,
                               spec(MaskKind::kDocs, 97, 2, 1, 64, 64, 0.0f, MemL::kBSHD, 32)}),
    [](const auto& tp) { return ring_case_name(tp.param); });

}  // namespace
}  // namespace cpattn::testing
