// Attention sinks, logit softcap, ALiBi and mask slices in the kernel (docs/design.md section 1):
// each alone and combined, with every mask family (the slice kinds included), odd sizes, GQA
// 8/2 and 8/1, Dqk != Dv, every position layout and dropout, fp32 and 16-bit, on every ISA path
// the CPU runs, against the float64 reference (tolerance rule: reference_case.h); slices against
// the same mask painted as a dense matrix; bitwise identities; bad parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "cpattn/mask.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using reference::CaseSpec;
using reference::Dims;
using reference::MaskKind;
using reference::PositionKind;

// The score features of a case: sinks, softcap (3: a strong nonlinearity for scores ~ N(0, 1)),
// ALiBi, and all three at once.
struct Features {
  bool sink = false;
  float softcap = 0.0f;
  bool alibi = false;
};
constexpr std::array<Features, 4> kFeatures = {
    {{true, 0.0f, false}, {false, 3.0f, false}, {false, 0.0f, true}, {true, 3.0f, true}}};
constexpr std::array<MaskKind, 10> kMasks = {
    MaskKind::kNone,           MaskKind::kCausal,    MaskKind::kWindow,
    MaskKind::kCausalWindow,   MaskKind::kDocs,      MaskKind::kDocsCausal,
    MaskKind::kPrefixLmSlices, MaskKind::kDocSlices, MaskKind::kSharedPrefixSlices,
    MaskKind::kRandomSlices};
constexpr std::array<PositionKind, 3> kPositions = {PositionKind::kContiguous,
                                                    PositionKind::kZigzag, PositionKind::kStriped};
// (Sq, Sk, Hq, Hkv, Dqk, Dv), rotating: odd sizes, GQA 8/2 and 8/1, Dqk != Dv.
constexpr std::array<std::array<int64_t, 6>, 6> kShapes = {{{97, 97, 8, 2, 64, 40},
                                                            {7, 97, 8, 1, 40, 64},
                                                            {97, 7, 4, 4, 64, 64},
                                                            {1, 1025, 2, 1, 40, 24},
                                                            {1025, 97, 1, 1, 24, 40},
                                                            {1025, 1025, 1, 1, 16, 16}}};

CaseSpec feature_spec(const Features& f, MaskKind mask, size_t n) {
  CaseSpec spec;
  spec.mask = mask;
  const auto& s = kShapes[n % kShapes.size()];
  spec.dims = {n % 5 == 4 ? 2 : 1, s[0], s[1], s[2], s[3], s[4], s[5]};
  spec.positions = s[0] == s[1] && mask >= MaskKind::kPrefixLmSlices ? PositionKind::kContiguous
                                                                     : kPositions[n % 3];
  spec.dropout_p = n % 3 == 1 ? 0.1f : 0.0f;
  spec.layout = n % 2 == 0 ? MemoryLayout::kBSHD : MemoryLayout::kBHSD;
  spec.sink = f.sink;
  spec.softcap = f.softcap;
  spec.alibi = f.alibi;
  spec.seed = 5000 + n;
  return spec;
}

// Every feature set with every mask family.
std::vector<CaseSpec> feature_cases() {
  std::vector<CaseSpec> cases;
  size_t n = 0;
  for (const Features& f : kFeatures) {
    for (MaskKind mask : kMasks) cases.push_back(feature_spec(f, mask, n++));
  }
  return cases;
}

void expect_case_passes(const CaseSpec& spec, const reference::Problem& problem) {
  const reference::Oracle oracle = reference::make_oracle(problem, true, spec.dtype);
  for (Isa isa : available_isas()) {
    const reference::Outputs got =
        reference::run_kernel(problem, {spec.layout, 2, true, isa, spec.dtype});
    EXPECT_TRUE(testing::row_passes(
        reference::compare(reference::case_name(spec) + " isa " + isa_name(isa), oracle, got)));
    if (spec.sink) {
      EXPECT_EQ(got.dsink.size(), static_cast<size_t>(spec.dims.Hq));
    }
  }
}

class KernelFeatures : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(KernelFeatures, MatchesDoubleReferenceOnEveryIsa) {
  expect_case_passes(GetParam(), reference::make_problem(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Fp32, KernelFeatures, ::testing::ValuesIn(feature_cases()),
                         [](const auto& p) { return reference::case_name(p.param); });

std::vector<CaseSpec> bf16_cases() {
  std::vector<CaseSpec> cases = feature_cases();
  for (CaseSpec& spec : cases) spec.dtype = DType::kBF16;
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Bf16, KernelFeatures, ::testing::ValuesIn(bf16_cases()),
                         [](const auto& p) { return reference::case_name(p.param); });

TEST(KernelFeaturesDesign, EveryFeatureMeetsEveryMaskAndTheAxesRotate) {
  const std::vector<CaseSpec> cases = feature_cases();
  std::set<std::string> names;
  std::set<std::array<int64_t, 2>> heads;
  std::set<PositionKind> positions;
  bool dqk_ne_dv = false, dropout = false, batched = false;
  for (const CaseSpec& c : cases) {
    EXPECT_TRUE(names.insert(reference::case_name(c)).second) << reference::case_name(c);
    heads.insert({c.dims.Hq, c.dims.Hkv});
    positions.insert(c.positions);
    dqk_ne_dv |= c.dims.Dqk != c.dims.Dv;
    dropout |= c.dropout_p > 0.0f;
    batched |= c.dims.B > 1;
  }
  EXPECT_EQ(cases.size(), kFeatures.size() * kMasks.size());
  EXPECT_TRUE(heads.count({8, 2}) && heads.count({8, 1}));
  EXPECT_EQ(positions.size(), kPositions.size());
  EXPECT_TRUE(dqk_ne_dv && dropout && batched);
}

// The combination: sink + softcap + window + documents + dropout (+ ALiBi), GQA, odd
// sizes, zigzag positions, fp32 and bf16.
TEST(KernelFeatures, SinkSoftcapWindowDocumentsDropoutTogether) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Dims& dims : {Dims{1, 97, 97, 8, 2, 64, 40}, Dims{2, 1025, 1025, 2, 1, 16, 24}}) {
      CaseSpec spec = reference::spec_of(MaskKind::kDocsCausal, dims, PositionKind::kZigzag, 0.1f,
                                         77 + static_cast<uint64_t>(dims.Sq));
      spec.sink = true;
      spec.softcap = 2.5f;
      spec.alibi = true;
      spec.dtype = dtype;
      reference::Problem problem = reference::make_problem(spec);
      problem.params.window_left = 40;
      problem.params.window_right = 3;
      problem.params.causal = false;
      expect_case_passes(spec, problem);
    }
  }
}

// Slices against the same masks painted cell by cell into a matrix (prefix-LM by its formula,
// documents by document_of, random slices by drawing each slice's picture), at odd sizes.
void paint(const MaskSlice& s, const std::vector<int64_t>& q_pos, const std::vector<int64_t>& k_pos,
           std::vector<uint8_t>& dense) {
  const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
  for (size_t i = 0; i < q_pos.size(); ++i) {
    for (size_t j = 0; j < k_pos.size(); ++j) {
      const int64_t r = q_pos[i] - s.q_begin, c = k_pos[j] - s.k_begin;
      if (r < 0 || r >= lq || c < 0 || c >= lk) continue;
      // The pictures: causal keeps the lower triangle whose diagonal ends in the bottom-right
      // corner (r = lq - 1, c = lk - 1); inverse causal the upper one from the top-left (0, 0).
      const bool lower = lk - 1 - c >= lq - 1 - r;
      const bool upper = c >= r;
      bool on = true;
      if (s.type == SliceType::kCausal) on = lower;
      if (s.type == SliceType::kInverseCausal) on = upper;
      if (s.type == SliceType::kBiCausal) on = lower && upper;
      if (on) dense[i * k_pos.size() + j] = 1;
    }
  }
}

TEST(KernelSlices, EqualTheSameMaskAsADenseMatrix) {
  for (MaskKind kind : {MaskKind::kPrefixLmSlices, MaskKind::kDocSlices,
                        MaskKind::kSharedPrefixSlices, MaskKind::kRandomSlices}) {
    for (int64_t s : {1, 7, 97, 1025}) {
      for (uint64_t seed : {1, 2}) {
        CaseSpec spec = reference::spec_of(kind, {1, s, s, 4, 2, 16, 16}, PositionKind::kContiguous,
                                           0.1f, 900 + seed);
        reference::Problem problem = reference::make_problem(spec);
        reference::Problem dense = problem;
        dense.params.slices.clear();
        dense.dense_mask.assign(static_cast<size_t>(s * s), 0);
        const int64_t prefix = s / 3;
        for (int64_t i = 0; i < s; ++i) {
          for (int64_t j = 0; j < s; ++j) {
            bool on = false;
            if (kind == MaskKind::kPrefixLmSlices) on = j < prefix || j <= i;
            if (kind == MaskKind::kDocSlices) {
              on = reference::document_of(i) == reference::document_of(j) && j <= i;
            }
            if (on) dense.dense_mask[static_cast<size_t>(i * s + j)] = 1;
          }
        }
        if (kind == MaskKind::kSharedPrefixSlices || kind == MaskKind::kRandomSlices) {
          for (const MaskSlice& slice : problem.params.slices) {
            paint(slice, problem.q_pos, problem.k_pos, dense.dense_mask);
          }
        }
        const reference::Oracle oracle = reference::make_oracle(dense);
        const reference::Outputs got = reference::run_kernel(problem, {});
        EXPECT_TRUE(testing::row_passes(reference::compare(
            reference::case_name(spec) + " seed " + std::to_string(seed), oracle, got)));
      }
    }
  }
}

// Runs the kernel (forward + backward, fp32, BSHD) and returns every result.
reference::Outputs run(const reference::Problem& p, Isa isa) {
  return reference::run_kernel(p, {MemoryLayout::kBSHD, 1, true, isa, DType::kF32});
}

void expect_bitwise_equal(const reference::Outputs& a, const reference::Outputs& b,
                          const std::string& what, bool gradients = true) {
  EXPECT_EQ(a.out, b.out) << what;
  EXPECT_EQ(a.lse, b.lse) << what;
  if (!gradients) return;
  EXPECT_EQ(a.dq, b.dq) << what;
  EXPECT_EQ(a.dk, b.dk) << what;
  EXPECT_EQ(a.dv, b.dv) << what;
}

reference::Problem plain_problem(MaskKind mask, uint64_t seed) {
  return reference::make_problem(
      reference::spec_of(mask, {2, 300, 300, 4, 2, 40, 40}, PositionKind::kContiguous, 0.1f, seed));
}

// The forward's scores are the same operations with and without a zero ALiBi term. (The
// backward's plain path may fuse scale * s - lse into one FMA, which the transformed scores,
// rounded before the subtraction like the forward's, do not: its gradients agree within the
// tolerance rule, as the sweep checks, not bitwise.)
TEST(KernelFeatureIdentities, ZeroAlibiSlopesGiveBitwiseTheForwardWithoutAlibi) {
  for (Isa isa : available_isas()) {
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kDocsCausal}) {
      const reference::Problem plain = plain_problem(mask, 3);
      reference::Problem zero = plain;
      zero.params.alibi_slopes.assign(4, 0.0f);
      expect_bitwise_equal(run(plain, isa), run(zero, isa), isa_name(isa), false);
    }
  }
}

TEST(KernelFeatureIdentities, ASliceOverEverythingIsBitwiseTheSameMaskWithoutSlices) {
  for (Isa isa : available_isas()) {
    reference::Problem causal = plain_problem(MaskKind::kCausal, 4);
    reference::Problem sliced = causal;
    sliced.params.causal = false;
    sliced.params.slices = {{0, 300, 0, 300, SliceType::kCausal}};
    expect_bitwise_equal(run(causal, isa), run(sliced, isa), "causal slice");
    reference::Problem full = plain_problem(MaskKind::kNone, 5);
    reference::Problem full_sliced = full;
    full_sliced.params.slices = {{0, 300, 0, 300, SliceType::kFull}};
    expect_bitwise_equal(run(full, isa), run(full_sliced, isa), "full slice");
  }
}

TEST(KernelFeatureIdentities, ANegligibleSinkIsBitwiseNoSink) {
  // exp(-80 - m) vanishes next to the row sum in fp32, so the sink's normaliser is the plain one.
  for (Isa isa : available_isas()) {
    const reference::Problem plain = plain_problem(MaskKind::kCausal, 6);
    reference::Problem sunk = plain;
    sunk.params.sink.assign(4, -80.0f);
    const reference::Outputs a = run(plain, isa), b = run(sunk, isa);
    expect_bitwise_equal(a, b, isa_name(isa));
    ASSERT_EQ(b.dsink.size(), 4u);
    for (double g : b.dsink) EXPECT_LT(std::fabs(g), 1e-20);
  }
}

TEST(KernelFeatures, RowsWithoutVisibleKeysGetTheSinkAsLse) {
  // Query 0..4 at positions before every key (causal): no visible key.
  reference::Problem p = reference::make_problem(reference::spec_of(
      MaskKind::kCausal, {1, 5, 9, 2, 1, 8, 8}, PositionKind::kContiguous, 0.0f, 8));
  p.q_pos = {0, 1, 2, 3, 4};
  p.k_pos = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  p.params.sink = {0.5f, -1.25f};
  for (Isa isa : available_isas()) {
    const reference::Outputs got = run(p, isa);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 5; ++i) {
        EXPECT_EQ(got.lse[static_cast<size_t>(h * 5 + i)], p.params.sink[h]);
      }
    }
    for (double x : got.out) EXPECT_EQ(x, 0.0);
    for (double x : got.dq) EXPECT_EQ(x, 0.0);
    EXPECT_EQ(got.dsink, (std::vector<double>{0.0, 0.0}));
  }
}

TEST(KernelFeatures, RecomputeIsBitwise) {
  CaseSpec spec = reference::spec_of(MaskKind::kRandomSlices, {2, 333, 333, 8, 2, 40, 24},
                                     PositionKind::kZigzag, 0.1f, 12);
  spec.sink = true;
  spec.softcap = 4.0f;
  spec.alibi = true;
  const reference::Problem p = reference::make_problem(spec);
  for (Isa isa : available_isas()) {
    const reference::Outputs a = reference::run_kernel(p, {MemoryLayout::kBSHD, 2, true, isa}),
                             b = reference::run_kernel(p, {MemoryLayout::kBSHD, 2, true, isa});
    expect_bitwise_equal(a, b, isa_name(isa));
    EXPECT_EQ(a.dsink, b.dsink);
  }
}

// Bad parameters: each a clear error naming the field, before any work.
class KernelFeatureErrors : public ::testing::Test {
 protected:
  void expect_error(const AttentionParams& params, ErrorCode code, const std::string& text) {
    const reference::Problem p = plain_problem(MaskKind::kNone, 9);
    reference::Problem bad = p;
    bad.params = params;
    try {
      reference::run_kernel(bad, {});
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
};

TEST_F(KernelFeatureErrors, SlicesThatOverlapNameBothAndAPair) {
  AttentionParams params;
  params.slices = {{0, 100, 0, 100, SliceType::kCausal},
                   {200, 300, 0, 50, SliceType::kFull},
                   {50, 150, 40, 200, SliceType::kInverseCausal}};
  // Slice 0 sees k <= q, slice 2 k >= q - 10: both see (q 50, k 40) first.
  expect_error(params, ErrorCode::kInvalidArgument,
               "mask slices must not overlap: slice 0 (q [0, 100), k [0, 100), causal) and "
               "slice 2 (q [50, 150), k [40, 200), inv_causal) both make key position 40 "
               "visible to query position 50");
}

TEST_F(KernelFeatureErrors, OverlappingRectanglesAreAllowedWhenTheirVisiblePartsAreDisjoint) {
  AttentionParams params;
  // Causal (k <= q) and inverse causal (k >= q) on one square share the diagonal.
  params.slices = {{0, 300, 0, 300, SliceType::kCausal},
                   {0, 300, 0, 300, SliceType::kInverseCausal}};
  EXPECT_THROW(resolve_params(params, 8, 4), Error);
  params.slices[1].type = SliceType::kBiCausal;  // the diagonal alone: still shared
  EXPECT_THROW(resolve_params(params, 8, 4), Error);
  // Inverse causal one key to the right sees k >= q + 1 only: the square is cut in two.
  params.slices[1] = {0, 300, 1, 301, SliceType::kInverseCausal};
  EXPECT_NO_THROW(resolve_params(params, 8, 4));
  // Empty slices overlap nothing.
  params.slices.push_back({0, 300, 7, 7, SliceType::kFull});
  params.slices.push_back({10, 20, 0, 5, SliceType::kBiCausal});  // Lq > Lk: empty
  EXPECT_NO_THROW(resolve_params(params, 8, 4));
}

TEST_F(KernelFeatureErrors, BadSliceRangesAndTypes) {
  AttentionParams params;
  params.slices = {{10, 5, 0, 4, SliceType::kFull}};
  expect_error(params, ErrorCode::kInvalidArgument, "slice 0 must have 0 <= q_begin <= q_end");
  params.slices = {{0, 5, -1, 4, SliceType::kFull}};
  expect_error(params, ErrorCode::kInvalidArgument, "slice 0 must have");
  params.slices = {{0, 5, 0, 4, static_cast<SliceType>(9)}};
  expect_error(params, ErrorCode::kInvalidArgument, "slice 0 has type 9");
}

TEST_F(KernelFeatureErrors, PerHeadArraysOfTheWrongLengthOrNotFinite) {
  AttentionParams params;
  params.alibi_slopes = {0.5f, 0.25f};
  expect_error(params, ErrorCode::kShapeMismatch,
               "alibi_slopes must have one value per query head of the call, Hq = 4, got 2");
  params = {};
  params.sink = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f};
  expect_error(params, ErrorCode::kShapeMismatch, "sink must have one value per query head");
  params.sink = {0.0f, NAN, 2.0f, 3.0f};
  expect_error(params, ErrorCode::kInvalidArgument, "sink[1] must be finite");
  params = {};
  params.alibi_slopes = {0.0f, 1.0f, INFINITY, 3.0f};
  expect_error(params, ErrorCode::kInvalidArgument, "alibi_slopes[2] must be finite");
}

TEST_F(KernelFeatureErrors, SoftcapOutsideItsRangeIsRefused) {
  // Negative, not finite, subnormal (1 / softcap overflows), beyond the range on either side.
  for (float cap : {-1.0f, INFINITY, NAN, 1e-40f, 0.5f * kMinSoftcap, 2.0f * kMaxSoftcap, 3e38f}) {
    AttentionParams params;
    params.softcap = cap;
    expect_error(params, ErrorCode::kInvalidArgument,
                 "softcap must be 0 (off) or in [2^-60, 2^60]");
  }
  AttentionParams params;  // in range, but the scale over the cap overflows
  params.softcap = kMinSoftcap;
  params.softmax_scale = 1e30f;
  expect_error(params, ErrorCode::kInvalidArgument, "softmax_scale / softcap finite");
}

TEST_F(KernelFeatureErrors, AlibiSlopesBeyondTheirBoundAreRefused) {
  AttentionParams params;
  params.alibi_slopes = {0.5f, -2.0f * kMaxAlibiSlope, 0.25f, 0.125f};
  expect_error(params, ErrorCode::kInvalidArgument, "alibi_slopes[1] must be within +-");
  params.alibi_slopes[1] = -kMaxAlibiSlope;
  EXPECT_NO_THROW(resolve_params(params, 8, 4));
}

// The ends of the ranges give the reference's numbers: the smallest softcap (every score
// saturated at +-softcap: a near-uniform softmax), the largest (tanh's linear range: the plain
// scores) and the steepest ALiBi slopes (every key but the nearest flushed), with sinks.
TEST(KernelFeatures, TheEndsOfTheSoftcapAndSlopeRangesMatchTheReference) {
  for (const float cap : {kMinSoftcap, kMaxSoftcap}) {
    CaseSpec spec = feature_spec({true, cap, false}, MaskKind::kCausal, 0);
    SCOPED_TRACE(::testing::Message() << "softcap " << cap);
    expect_case_passes(spec, reference::make_problem(spec));
  }
  CaseSpec spec = feature_spec({true, 0.0f, true}, MaskKind::kNone, 1);
  reference::Problem problem = reference::make_problem(spec);
  for (size_t h = 0; h < problem.params.alibi_slopes.size(); ++h) {
    problem.params.alibi_slopes[h] = h % 2 ? kMaxAlibiSlope : -kMaxAlibiSlope;
  }
  SCOPED_TRACE("slopes +-2^60");
  expect_case_passes(spec, problem);
}

TEST(KernelFeatureErrorsBackward, DsinkNeedsASinkAndOneValuePerHead) {
  const reference::Problem p = plain_problem(MaskKind::kNone, 10);
  const reference::ProblemTensors t(p);
  const Tensor out({2, 300, 4, 40});
  Tensor dq({2, 300, 4, 40}), dk({2, 300, 2, 40}), dv({2, 300, 2, 40});
  std::vector<float> lse(2 * 4 * 300, 0.0f), dsink(4);
  const AttentionInputs in{t.q.view(), t.k.view(), t.v.view(), p.q_pos, p.k_pos, {}, {}};
  BackwardOptions options;
  options.dsink = dsink;
  AttentionParams params;
  EXPECT_THROW(
      {
        try {
          attention_kernel_backward(in, params, {}, t.dout.view(), out.view(), lse, dq.view(),
                                    dk.view(), dv.view(), options);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("dsink was given but params.sink is empty"),
                    std::string::npos);
          throw;
        }
      },
      Error);
  params.sink.assign(4, 0.0f);
  std::vector<float> short_dsink(3);
  options.dsink = short_dsink;
  EXPECT_THROW(attention_kernel_backward(in, params, {}, t.dout.view(), out.view(), lse, dq.view(),
                                         dk.view(), dv.view(), options),
               Error);
}

// The allocating backward returns dsink (empty without sinks).
TEST(KernelFeatures, AllocatingBackwardReturnsDsink) {
  reference::Problem p = plain_problem(MaskKind::kCausal, 11);
  const reference::ProblemTensors t(p);
  const AttentionInputs in{t.q.view(), t.k.view(), t.v.view(), p.q_pos, p.k_pos, {}, {}};
  const KernelForwardResult plain = attention_kernel_forward(in, p.params, p.rng);
  EXPECT_EQ(attention_kernel_backward(in, p.params, p.rng, t.dout.view(), plain.out.view(),
                                      plain.lse.span())
                .dsink.numel(),
            0);
  p.params.sink = {1.0f, -1.0f, 0.5f, 0.0f};
  const KernelForwardResult sunk = attention_kernel_forward(in, p.params, p.rng);
  const AttentionGradients g = attention_kernel_backward(in, p.params, p.rng, t.dout.view(),
                                                         sunk.out.view(), sunk.lse.span());
  ASSERT_EQ(g.dsink.numel(), 4);
  const reference::Outputs exact = reference::attention(p);
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_NEAR(g.dsink.data()[h], exact.dsink[static_cast<size_t>(h)],
                1e-4 * std::max(1.0, std::fabs(exact.dsink[static_cast<size_t>(h)])));
  }
}

}  // namespace
}  // namespace cpattn
