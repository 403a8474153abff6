// The kernel against the double reference over a designed sweep: every value of every axis
// (sizes, head dims, GQA, batch, masks, position layouts, dropout, memory layout) and the pairs
// that interact, ~100 cases instead of the full product, each on every ISA path the CPU runs.
// Tolerance rule: reference_case.h.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "cpattn/isa.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using reference::CaseSpec;
using reference::Dims;
using reference::MaskKind;
using reference::PositionKind;

constexpr std::array<MaskKind, 6> kMasks = {MaskKind::kNone,   MaskKind::kCausal,
                                            MaskKind::kWindow, MaskKind::kCausalWindow,
                                            MaskKind::kDocs,   MaskKind::kDocsCausal};
constexpr std::array<PositionKind, 3> kPositions = {PositionKind::kContiguous,
                                                    PositionKind::kZigzag, PositionKind::kStriped};
constexpr std::array<float, 3> kDropouts = {0.0f, 0.1f, 0.5f};
constexpr std::array<MemoryLayout, 3> kLayouts = {MemoryLayout::kBSHD, MemoryLayout::kBHSD,
                                                  MemoryLayout::kSBHD};
constexpr std::array<int64_t, 4> kSizes = {1, 7, 97, 1025};
constexpr std::array<std::array<int64_t, 2>, 5> kHeadDims = {
    {{8, 8}, {40, 40}, {64, 64}, {128, 128}, {192, 128}}};
constexpr std::array<std::array<int64_t, 2>, 3> kHeads = {{{1, 1}, {4, 1}, {8, 2}}};

CaseSpec make_spec(MaskKind mask, Dims dims, PositionKind positions, float p, MemoryLayout layout) {
  CaseSpec spec;
  spec.mask = mask;
  spec.dims = dims;
  spec.positions = positions;
  spec.dropout_p = p;
  spec.layout = layout;
  return spec;
}

std::vector<CaseSpec> sweep_cases() {
  std::vector<CaseSpec> cases;
  // (A) Every (Sq, Sk) pair; big pairs get small heads so the double reference stays quick.
  size_t n = 0;
  for (int64_t sq : kSizes) {
    for (int64_t sk : kSizes) {
      const bool big = sq == 1025 || sk == 1025;
      const auto [hq, hkv] = (sq == 1025 && sk == 1025) ? kHeads[0] : kHeads[1];
      const int64_t d = big ? 40 : 64;
      const int64_t b = !big && n % 2 == 1 ? 3 : 1;
      const PositionKind pos = sq == sk ? PositionKind::kContiguous : kPositions[n % 3];
      cases.push_back(make_spec(kMasks[n % 6], {b, sq, sk, hq, hkv, d, d}, pos, kDropouts[n % 3],
                                kLayouts[(n / 3) % 3]));
      ++n;
    }
  }
  // (B) Every mask with every position layout, Sq != Sk both ways, GQA 8x2.
  n = 0;
  for (MaskKind mask : kMasks) {
    for (PositionKind pos : kPositions) {
      const bool wide = n % 2 == 0;
      cases.push_back(make_spec(mask, {1, wide ? 97 : 1025, wide ? 1025 : 97, 8, 2, 8, 8}, pos,
                                kDropouts[n % 3], kLayouts[n % 3]));
      ++n;
    }
  }
  // (C) Every mask with each non-zero dropout; half of them batched.
  n = 0;
  for (MaskKind mask : kMasks) {
    for (float p : {0.1f, 0.5f}) {
      cases.push_back(make_spec(mask, {n % 2 == 0 ? 3 : 1, 97, 97, 4, 1, 64, 64}, kPositions[n % 3],
                                p, kLayouts[(n + 1) % 3]));
      ++n;
    }
  }
  // (D) Every head dim x head grouping x memory layout; masks, dropout, sizes rotate.
  n = 0;
  constexpr std::array<std::array<int64_t, 2>, 3> kShortSizes = {{{97, 97}, {7, 97}, {97, 7}}};
  for (const auto& [dqk, dv] : kHeadDims) {
    for (const auto& [hq, hkv] : kHeads) {
      for (MemoryLayout layout : kLayouts) {
        const auto [sq, sk] = kShortSizes[n % 3];
        cases.push_back(make_spec(kMasks[n % 6], {n % 4 == 3 ? 3 : 1, sq, sk, hq, hkv, dqk, dv},
                                  kPositions[(n / 3) % 3], kDropouts[(n / 2) % 3], layout));
        ++n;
      }
    }
  }
  // (E) A few big, wide-head problems where tiles of every class meet.
  cases.push_back(make_spec(MaskKind::kCausal, {1, 97, 1025, 8, 2, 192, 128},
                            PositionKind::kContiguous, 0.1f, MemoryLayout::kBHSD));
  cases.push_back(make_spec(MaskKind::kCausal, {1, 1025, 1025, 1, 1, 192, 128},
                            PositionKind::kZigzag, 0.1f, MemoryLayout::kBSHD));
  cases.push_back(make_spec(MaskKind::kDocsCausal, {1, 1025, 1025, 1, 1, 128, 128},
                            PositionKind::kContiguous, 0.0f, MemoryLayout::kSBHD));
  cases.push_back(make_spec(MaskKind::kCausalWindow, {1, 1025, 1025, 2, 1, 64, 64},
                            PositionKind::kStriped, 0.5f, MemoryLayout::kBHSD));
  cases.push_back(make_spec(MaskKind::kWindow, {3, 1025, 97, 8, 2, 192, 128}, PositionKind::kZigzag,
                            0.0f, MemoryLayout::kSBHD));
  // Distinct seeds; names must be unique (a repeated spec would add nothing).
  std::vector<CaseSpec> unique;
  std::set<std::string> names;
  for (CaseSpec& spec : cases) {
    if (!names.insert(reference::case_name(spec)).second) continue;
    spec.seed = 1000 + unique.size();
    unique.push_back(spec);
  }
  return unique;
}

class KernelSweep : public ::testing::TestWithParam<CaseSpec> {};

// The oracle is computed once per case; the kernel runs on every available ISA.
TEST_P(KernelSweep, MatchesDoubleReferenceWithinFp32ToleranceOnEveryIsa) {
  const CaseSpec& spec = GetParam();
  const reference::Problem problem = reference::make_problem(spec);
  const reference::Oracle oracle = reference::make_oracle(problem, true, spec.dtype);
  for (Isa isa : available_isas()) {
    const reference::Outputs got =
        reference::run_kernel(problem, {spec.layout, 1, true, isa, spec.dtype});
    EXPECT_TRUE(testing::row_passes(
        reference::compare(reference::case_name(spec) + " isa " + isa_name(isa), oracle, got)));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, KernelSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const auto& p) { return reference::case_name(p.param); });

// The same sweep with q, k, v, dout, out, dq, dk, dv in bf16 and in fp16 (lse fp32), judged by the
// same rule against the plain implementation in that dtype (reference_case.h).
std::vector<CaseSpec> dtype_cases(DType dtype) {
  std::vector<CaseSpec> cases = sweep_cases();
  for (CaseSpec& spec : cases) spec.dtype = dtype;
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Bf16, KernelSweep, ::testing::ValuesIn(dtype_cases(DType::kBF16)),
                         [](const auto& p) { return reference::case_name(p.param); });
INSTANTIATE_TEST_SUITE_P(Fp16, KernelSweep, ::testing::ValuesIn(dtype_cases(DType::kF16)),
                         [](const auto& p) { return reference::case_name(p.param); });

// The list really covers every value of every axis.
TEST(KernelSweepDesign, CoversEveryAxisValue) {
  const std::vector<CaseSpec> cases = sweep_cases();
  std::set<int64_t> sq, sk, b;
  std::set<std::array<int64_t, 2>> dims, heads;
  std::set<MaskKind> masks;
  std::set<PositionKind> positions;
  std::set<float> dropouts;
  std::set<MemoryLayout> layouts;
  for (const CaseSpec& c : cases) {
    sq.insert(c.dims.Sq);
    sk.insert(c.dims.Sk);
    b.insert(c.dims.B);
    dims.insert({c.dims.Dqk, c.dims.Dv});
    heads.insert({c.dims.Hq, c.dims.Hkv});
    masks.insert(c.mask);
    positions.insert(c.positions);
    dropouts.insert(c.dropout_p);
    layouts.insert(c.layout);
  }
  EXPECT_EQ(sq.size(), kSizes.size());
  EXPECT_EQ(sk.size(), kSizes.size());
  EXPECT_EQ(b, (std::set<int64_t>{1, 3}));
  for (const auto& d : kHeadDims) EXPECT_TRUE(dims.count(d)) << d[0] << "x" << d[1];
  for (const auto& h : kHeads) EXPECT_TRUE(heads.count(h)) << h[0] << "x" << h[1];
  EXPECT_EQ(masks.size(), kMasks.size());
  EXPECT_EQ(positions.size(), kPositions.size());
  EXPECT_EQ(dropouts.size(), kDropouts.size());
  EXPECT_EQ(layouts.size(), kLayouts.size());
  EXPECT_GE(cases.size(), 90u);
  EXPECT_LE(cases.size(), 200u);
}

}  // namespace
}  // namespace cpattn
