// Runtime dispatch (cpattn/isa.h, docs/design.md section 3): the dispatcher picks the best path
// the CPU supports (checked here against CPUID read independently), forcing each path (by
// KernelOptions::isa and by CPATTN_ISA) runs that copy, the FMA paths agree bitwise, every path is
// deterministic, and paths the CPU lacks are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "cpattn_compiled_isas.h"
#include "kernel/tile_plan.h"
#include "support/metrics.h"
#include "support/random_case.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using reference::CaseSpec;
using reference::MaskKind;
using reference::PositionKind;

// Whether this build compiled a copy (cmake/isa.cmake generates the list from the ISA table).
bool compiled(Isa isa) {
#define CPATTN_IS_COMPILED(path, name) || isa == Isa::path
  return false CPATTN_COMPILED_ISAS(CPATTN_IS_COMPILED);
#undef CPATTN_IS_COMPILED
}

// A row of the ISA table as data: what the tests below check each path against.
struct IsaRow {
  Isa isa;
  const char* name;
  int lanes;
  std::vector<std::string> features;
};

std::vector<IsaRow> isa_rows() {
#define CPATTN_FEATURE_NAME(feature) #feature,
#define CPATTN_ISA_ROW(path, name, lanes, features) {Isa::path, #name, lanes, {features}},
  return {CPATTN_ISA_TABLE(CPATTN_ISA_ROW, CPATTN_FEATURE_NAME)};
#undef CPATTN_ISA_ROW
#undef CPATTN_FEATURE_NAME
}

// What the CPU and OS support, from CPUID and XCR0 read here, independently of the library's
// __builtin_cpu_supports, one feature of the table at a time: AVX2 is CPUID.7.EBX[5], FMA
// CPUID.1.ECX[12], both needing YMM state in XCR0 (bits 1, 2); AVX-512 F/DQ/BW/VL are CPUID.7.EBX
// bits 16, 17, 30, 31 and need opmask/ZMM state as well (XCR0 bits 5, 6, 7); AVX-512-BF16 is
// CPUID.(EAX=7, ECX=1).EAX[5]. A feature this oracle does not know fails the test.
bool cpu_has_feature(const std::string& feature) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = (c >> 12) & 1, osxsave = (c >> 27) & 1;
  if (!osxsave) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool ymm = (xcr0_lo & 0x6) == 0x6, zmm = (xcr0_lo & 0xE6) == 0xE6;
  const unsigned leaf7_ebx = b;
  const bool leaf7_1 = __get_cpuid_count(7, 1, &a, &b, &c, &d);
  if (feature == "fma") return fma && ymm;
  if (feature == "avx2") return ((leaf7_ebx >> 5) & 1) && ymm;
  if (feature == "avx512f") return ((leaf7_ebx >> 16) & 1) && zmm;
  if (feature == "avx512dq") return ((leaf7_ebx >> 17) & 1) && zmm;
  if (feature == "avx512bw") return ((leaf7_ebx >> 30) & 1) && zmm;
  if (feature == "avx512vl") return ((leaf7_ebx >> 31) & 1) && zmm;
  if (feature == "avx512bf16") return leaf7_1 && ((a >> 5) & 1) && zmm;
  ADD_FAILURE() << "the test's CPUID oracle does not know the feature " << feature;
#else
  (void)feature;
#endif
  return false;
}

// Whether the CPU runs a path: every feature of its row.
bool cpu_has(Isa isa) {
  for (const IsaRow& row : isa_rows()) {
    if (row.isa != isa) continue;
    return std::all_of(row.features.begin(), row.features.end(), cpu_has_feature);
  }
  return false;
}

// Sets CPATTN_ISA for one scope and restores the previous value.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* value) {
    if (const char* old = std::getenv("CPATTN_ISA")) old_ = old;
    if (value == nullptr) {
      unsetenv("CPATTN_ISA");
    } else {
      setenv("CPATTN_ISA", value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv("CPATTN_ISA", old_->c_str(), 1);
    } else {
      unsetenv("CPATTN_ISA");
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

TEST(Isa, DetectedIsTheWidestPathTheCpuSupports) {
  Isa want = Isa::kGeneric;
  for (Isa isa : kIsaPaths) {
    if (compiled(isa) && cpu_has(isa)) want = isa;
  }
  EXPECT_EQ(isa_name(detected_isa()), std::string(isa_name(want)));
  const ScopedEnv unset(nullptr);
  EXPECT_EQ(resolve_isa(Isa::kAuto), fastest_isa());
  const ScopedEnv automatic("auto");
  EXPECT_EQ(resolve_isa(Isa::kAuto), fastest_isa());
}

// The CPU's vendor, family and model, read here independently of the library.
struct Model {
  std::string vendor;
  unsigned family = 0, model = 0;
};
Model cpu_model() {
  Model m;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid(0, &a, &b, &c, &d);
  const unsigned words[3] = {b, d, c};
  m.vendor.assign(reinterpret_cast<const char*>(words), 12);
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned family = (a >> 8) & 0xF;
  m.family = family == 0xF ? family + ((a >> 20) & 0xFF) : family;
  m.model = ((a >> 4) & 0xF) | ((family == 6 || family == 0xF) ? ((a >> 16) & 0xF) << 4 : 0);
#endif
  return m;
}

// The documented table (cpattn/isa.h: bf16_dot_rate): full rate on AMD Zen 4 and Zen 5, half on
// Intel Sapphire and Emerald Rapids; nothing for other CPUs, which are measured.
std::optional<bool> documented_full_rate(const Model& m) {
  if (m.vendor == "AuthenticAMD" && (m.family == 0x19 || m.family == 0x1A)) return true;
  if (m.vendor == "GenuineIntel" && m.family == 6 && (m.model == 0x8F || m.model == 0xCF)) {
    return false;
  }
  return std::nullopt;
}

TEST(Isa, AutoNeverPicksTheSlowerBf16Path) {
  const Bf16DotRate& rate = bf16_dot_rate();
  if (detected_isa() != Isa::kAvx512Bf16) {
    EXPECT_EQ(fastest_isa(), detected_isa());
    EXPECT_FALSE(rate.full_rate);
    EXPECT_EQ(rate.source, "no AVX512_BF16");
    return;
  }
  const std::optional<bool> documented = documented_full_rate(cpu_model());
  if (documented) {
    EXPECT_EQ(rate.full_rate, *documented) << rate.source;
    EXPECT_EQ(rate.measured, 0.0) << rate.source;
  } else {
    EXPECT_THAT(rate.source, ::testing::HasSubstr("measured"));
    EXPECT_EQ(rate.full_rate, rate.measured >= 0.75) << rate.source;
  }
  // Half rate: bf16 widened to fp32 (avx512) is the faster path and the one kAuto takes.
  EXPECT_EQ(fastest_isa(), rate.full_rate ? Isa::kAvx512Bf16 : Isa::kAvx512) << rate.source;
}

TEST(Isa, TheBf16PathChoiceIsStableWithinTheProcess) {
  const Bf16DotRate& first = bf16_dot_rate();
  const Isa path = fastest_isa();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(&bf16_dot_rate(), &first);
    EXPECT_EQ(fastest_isa(), path);
  }
}

// The fallback measurement, run on this CPU whatever the table says: an instruction throughput
// ratio near 1 (full rate) or 1/4 (Intel's half flop rate), on the side of 0.75 the table puts
// this CPU.
TEST(Isa, TheBf16DotMeasurementIsAThroughputRatio) {
  if (detected_isa() != Isa::kAvx512Bf16) {
    EXPECT_EQ(detail::isa_kernels(Isa::kAvx512).bf16_dot_vs_fma_rate(), 0.0);
    GTEST_SKIP() << "no AVX512_BF16";
  }
  const double ratio = detail::isa_kernels(Isa::kAvx512Bf16).bf16_dot_vs_fma_rate();
  EXPECT_GT(ratio, 0.1);
  EXPECT_LT(ratio, 3.0);
  if (const std::optional<bool> documented = documented_full_rate(cpu_model())) {
    EXPECT_EQ(ratio >= 0.75, *documented) << "measured " << ratio;
  }
}

TEST(Isa, NumericsClasses) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_EQ(kernel_numerics(Isa::kGeneric, t), KernelNumerics::kNoFma);
    EXPECT_EQ(kernel_numerics(Isa::kAvx2, t), KernelNumerics::kFma);
    EXPECT_EQ(kernel_numerics(Isa::kAvx512, t), KernelNumerics::kFma);
  }
  EXPECT_EQ(kernel_numerics(Isa::kAvx512Bf16, DType::kF32), KernelNumerics::kFma);
  EXPECT_EQ(kernel_numerics(Isa::kAvx512Bf16, DType::kF16), KernelNumerics::kFma);
  EXPECT_EQ(kernel_numerics(Isa::kAvx512Bf16, DType::kBF16), KernelNumerics::kBf16Dot);
  EXPECT_STREQ(kernel_numerics_name(KernelNumerics::kNoFma), "no-fma");
  EXPECT_STREQ(kernel_numerics_name(KernelNumerics::kFma), "fma");
  EXPECT_STREQ(kernel_numerics_name(KernelNumerics::kBf16Dot), "bf16-dot");
}

TEST(Isa, AmxSupportIsReadConsistently) {
  const AmxSupport amx = amx_support();
  Model m = cpu_model();
  unsigned a = 0, b = 0, c = 0, d = 0;
#if defined(__x86_64__)
  __get_cpuid_count(7, 0, &a, &b, &c, &d);
#endif
  EXPECT_EQ(amx.cpu, ((d >> 24) & 1) && ((d >> 22) & 1)) << m.vendor;
  if (!amx.cpu) {
    EXPECT_FALSE(amx.permitted);
    EXPECT_EQ(amx.summary(), "AMX-BF16 not exposed by this CPU");
  } else {
    EXPECT_THAT(amx.summary(), ::testing::HasSubstr("AMX-BF16"));
  }
  EXPECT_EQ(amx_support().permitted, amx.permitted);  // reading requested nothing
}

TEST(Isa, AvailableListsEverySupportedPathInOrder) {
  std::vector<Isa> want;
  for (Isa isa : kIsaPaths) {
    if (compiled(isa) && cpu_has(isa)) want.push_back(isa);
  }
  EXPECT_EQ(available_isas(), want);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(want.front(), Isa::kGeneric);
  EXPECT_EQ(want.back(), detected_isa());
}

TEST(Isa, Names) {
  EXPECT_STREQ(isa_name(Isa::kAuto), "auto");
  EXPECT_STREQ(isa_name(Isa::kGeneric), "generic");
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_STREQ(isa_name(Isa::kAvx512Bf16), "avx512bf16");
}

TEST(Isa, EnvironmentChoosesForAutoOnlyAndIsChecked) {
  for (Isa isa : available_isas()) {
    const ScopedEnv env(isa_name(isa));
    EXPECT_EQ(resolve_isa(Isa::kAuto), isa);
    // An explicit request wins over the environment.
    EXPECT_EQ(resolve_isa(Isa::kGeneric), Isa::kGeneric);
  }
  for (const char* value : {"", "auto"}) {
    const ScopedEnv env(value);
    EXPECT_EQ(resolve_isa(Isa::kAuto), fastest_isa()) << "CPATTN_ISA='" << value << "'";
  }
  const ScopedEnv bad("sse9");
  try {
    resolve_isa(Isa::kAuto);
    ADD_FAILURE() << "CPATTN_ISA=sse9 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    std::string accepted = "expected one of auto";  // then every row of the table, in its order
    for (const IsaRow& row : isa_rows()) {
      accepted += ", ";
      accepted += row.name;
    }
    EXPECT_THAT(e.what(), ::testing::HasSubstr(accepted + " ("));
  }
  // A kernel call resolves kAuto through the same check.
  CaseSpec small;
  small.dims = {1, 7, 7, 1, 1, 8, 8};
  try {
    reference::run_kernel(reference::make_problem(small), {});
    ADD_FAILURE() << "a kernel call with CPATTN_ISA=sse9 ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPATTN_ISA='sse9'"), std::string::npos) << e.what();
  }
}

TEST(Isa, PathsTheCpuLacksAreRefused) {
  int refused = 0;
  for (Isa isa : kIsaPaths) {
    if (compiled(isa) && cpu_has(isa)) continue;
    ++refused;
    EXPECT_THROW(resolve_isa(isa), Error) << isa_name(isa);
    const ScopedEnv env(isa_name(isa));
    EXPECT_THROW(resolve_isa(Isa::kAuto), Error) << "CPATTN_ISA=" << isa_name(isa);
  }
  if (refused == 0) std::printf("(this CPU and build run every path: nothing to refuse)\n");
}

// Every row of the ISA table, one instance each (a new row is tested without an edit here):
// this build compiles it where its compiler can (generic always), the dispatcher hands a
// compiled row its own copy (entry points of its lane width), the name round-trips, and it is
// available exactly when compiled and the CPU reports every feature of the row.
class EveryIsaRow : public ::testing::TestWithParam<IsaRow> {};

TEST_P(EveryIsaRow, IsBuiltNamedAndDispatchedToItsCopy) {
  const IsaRow& row = GetParam();
  EXPECT_STREQ(isa_name(row.isa), row.name);
  if (row.isa == kIsaPaths[0]) {
    EXPECT_TRUE(compiled(row.isa)) << "the fallback path is missing";
  }
  const std::vector<Isa> available = available_isas();
  const bool is_available =
      std::find(available.begin(), available.end(), row.isa) != available.end();
  EXPECT_EQ(is_available, compiled(row.isa) && cpu_has(row.isa));
  if (!compiled(row.isa)) {
    EXPECT_THROW(detail::isa_kernels(row.isa), Error);
    GTEST_SKIP() << "this compiler builds no " << row.name << " copy";
  }
  const detail::IsaKernels copy = detail::isa_kernels(row.isa);
  EXPECT_EQ(copy.isa, row.isa);
  EXPECT_EQ(copy.nr, 2 * row.lanes);  // the packed panel is two vectors wide
  if (!is_available) {
    EXPECT_THROW(resolve_isa(row.isa), Error);
    GTEST_SKIP() << "this CPU lacks " << row.name;
  }
  EXPECT_EQ(resolve_isa(row.isa), row.isa);
}

std::string row_label(const ::testing::TestParamInfo<IsaRow>& row) { return row.param.name; }

INSTANTIATE_TEST_SUITE_P(Table, EveryIsaRow, ::testing::ValuesIn(isa_rows()), row_label);

using reference::spec_of;

// Masks, GQA, Dqk != Dv, dropout, odd sizes, batches, every memory layout.
const std::vector<CaseSpec> kCases = {
    spec_of(MaskKind::kCausal, {2, 97, 1025, 8, 2, 192, 128}, PositionKind::kZigzag, 0.1f, 1,
            MemoryLayout::kBHSD),
    spec_of(MaskKind::kDocsCausal, {1, 257, 257, 4, 1, 40, 24}, PositionKind::kStriped, 0.0f, 2,
            MemoryLayout::kSBHD),
    spec_of(MaskKind::kWindow, {3, 7, 97, 4, 4, 8, 8}, PositionKind::kContiguous, 0.5f, 3,
            MemoryLayout::kBSHD),
    spec_of(MaskKind::kNone, {1, 300, 300, 2, 1, 128, 128}, PositionKind::kContiguous, 0.0f, 4,
            MemoryLayout::kBSHD),
};

std::string case_label(const ::testing::TestParamInfo<CaseSpec>& info) {
  return reference::case_name(info.param);
}

class IsaPaths : public ::testing::TestWithParam<CaseSpec> {};

// Forcing a path by KernelOptions::isa and by CPATTN_ISA runs that copy: both give the same bits,
// and each path passes the tolerance rule.
TEST_P(IsaPaths, ForcingEachPathRunsThatCopy) {
  const CaseSpec& spec = GetParam();
  const reference::Problem p = reference::make_problem(spec);
  const reference::Oracle oracle = reference::make_oracle(p);
  for (Isa isa : available_isas()) {
    EXPECT_EQ(detail::isa_kernels(resolve_isa(isa)).isa, isa);
    const reference::Outputs forced = reference::run_kernel(p, {spec.layout, 2, true, isa});
    EXPECT_TRUE(testing::row_passes(
        reference::compare(std::string("isa ") + isa_name(isa), oracle, forced)));
    const ScopedEnv env(isa_name(isa));
    const reference::Outputs by_env = reference::run_kernel(p, {spec.layout, 2, true});
    EXPECT_TRUE(testing::outputs_bitwise_equal(forced, by_env)) << "CPATTN_ISA=" << isa_name(isa);
  }
}

// The FMA paths run the same operations in the same order (every reduction's order is fixed
// independently of the lane count), so out, lse, dq, dk and dv are bitwise equal across them.
TEST_P(IsaPaths, FmaPathsAgreeBitwise) {
  std::vector<Isa> fma;
  for (Isa isa : available_isas()) {
    if (isa != Isa::kGeneric) fma.push_back(isa);
  }
  if (fma.size() < 2) GTEST_SKIP() << "fewer than two FMA paths on this CPU";
  const CaseSpec& spec = GetParam();
  const reference::Problem p = reference::make_problem(spec);
  for (int threads : {1, 3}) {
    const reference::Outputs first = reference::run_kernel(p, {spec.layout, threads, true, fma[0]});
    for (size_t i = 1; i < fma.size(); ++i) {
      const reference::Outputs other =
          reference::run_kernel(p, {spec.layout, threads, true, fma[i]});
      EXPECT_TRUE(testing::outputs_bitwise_equal(first, other))
          << isa_name(fma[0]) << " vs " << isa_name(fma[i]) << ", " << threads << " threads";
    }
  }
}

// Same path, same thread count: the same bits, run after run.
TEST_P(IsaPaths, EachPathIsDeterministic) {
  const CaseSpec& spec = GetParam();
  const reference::Problem p = reference::make_problem(spec);
  for (Isa isa : available_isas()) {
    const reference::Outputs a = reference::run_kernel(p, {spec.layout, 2, true, isa});
    const reference::Outputs b = reference::run_kernel(p, {spec.layout, 2, true, isa});
    EXPECT_TRUE(testing::outputs_bitwise_equal(a, b)) << isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, IsaPaths, ::testing::ValuesIn(kCases), case_label);

// The worst err / tol over the tensors of one comparison.
double worst_ratio(const reference::ErrorRow& row) {
  double worst = 0.0;
  for (size_t t = 0; t < row.err.size(); ++t) {
    if (row.tol[t] > 0.0) worst = std::max(worst, row.err[t] / row.tol[t]);
  }
  return worst;
}

class Bf16DotPath : public ::testing::TestWithParam<CaseSpec> {};

// avx512bf16 runs bf16 calls on vdpbf16ps (its P V product rounds P to bf16, so its bits differ
// from avx512's widened fp32 products) within the bf16 tolerance rule, and runs fp16 calls with
// exactly avx512's code (fp32 calls: FmaPathsAgreeBitwise).
TEST_P(Bf16DotPath, RunsBf16CallsOnDotProductsAndOthersAsAvx512) {
  const std::vector<Isa> isas = available_isas();
  if (std::find(isas.begin(), isas.end(), Isa::kAvx512Bf16) == isas.end()) {
    GTEST_SKIP() << "no AVX-512-BF16 on this CPU or build";
  }
  CaseSpec spec = GetParam();
  spec.dtype = DType::kBF16;
  const reference::Problem p = reference::make_problem(spec);
  const reference::Oracle oracle = reference::make_oracle(p, true, DType::kBF16);
  const reference::Outputs dot =
      reference::run_kernel(p, {spec.layout, 2, true, Isa::kAvx512Bf16, DType::kBF16});
  const reference::Outputs wide =
      reference::run_kernel(p, {spec.layout, 2, true, Isa::kAvx512, DType::kBF16});
  const reference::ErrorRow dot_row = reference::compare("avx512bf16", oracle, dot);
  const reference::ErrorRow wide_row = reference::compare("avx512", oracle, wide);
  EXPECT_TRUE(testing::row_passes(dot_row));
  EXPECT_TRUE(testing::row_passes(wide_row));
  EXPECT_FALSE(testing::outputs_bitwise_equal(dot, wide)) << "the bf16 call did not use vdpbf16ps";
  std::printf("worst err/tol: avx512bf16 %.3f, avx512 %.3f\n", worst_ratio(dot_row),
              worst_ratio(wide_row));

  spec.dtype = DType::kF16;
  const reference::Problem p16 = reference::make_problem(spec);
  EXPECT_TRUE(testing::outputs_bitwise_equal(
      reference::run_kernel(p16, {spec.layout, 2, true, Isa::kAvx512Bf16, DType::kF16}),
      reference::run_kernel(p16, {spec.layout, 2, true, Isa::kAvx512, DType::kF16})));
}

INSTANTIATE_TEST_SUITE_P(Cases, Bf16DotPath, ::testing::ValuesIn(kCases), case_label);

// Random bf16 and fp16 problems on every path, every mask kind and score feature, odd sizes,
// within the 16-bit rule (reference_case.h): the stored results' rounding and, on the bf16 dot
// products, the forward's rounded P and the backward's rounded Z P and dS (its kTolProducts16
// term). Every run draws new cases (RC_PARAMS="max_success=5000" for a longer search).
RC_GTEST_PROP(SixteenBitProperty, RandomCasesOnEveryPathStayWithinTheRule, ()) {
  CaseSpec spec;
  spec.dtype = *rc::gen::element(DType::kBF16, DType::kF16);
  const Isa isa = *rc::gen::elementOf(available_isas());
  spec.mask = *rc::gen::element(MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                                MaskKind::kCausalWindow, MaskKind::kDocs, MaskKind::kDocsCausal,
                                MaskKind::kRandomSlices);
  spec.dims = testing::draw_dims({.sq_end = 140,
                                  .sk_begin = 1,
                                  .sk_end = 200,
                                  .dqk = {1, 7, 64, 97, 128},
                                  .dv = {1, 8, 33, 128}});
  spec.positions = testing::draw_positions();
  spec.dropout_p = *rc::gen::element(0.0f, 0.1f, 0.5f);
  spec.sink = *rc::gen::arbitrary<bool>();
  spec.softcap = *rc::gen::element(0.0f, 3.0f);
  spec.alibi = *rc::gen::arbitrary<bool>();
  spec.seed = *rc::gen::inRange<uint64_t>(1, 1u << 30);
  const reference::Problem p = reference::make_problem(spec);
  const reference::ErrorRow row =
      reference::compare(case_name(spec), reference::make_oracle(p, true, spec.dtype),
                         reference::run_kernel(p, {spec.layout, 2, true, isa, spec.dtype}));
  RC_TAG(worst_ratio(row) > 0.5 ? "err/tol > 0.5" : "err/tol <= 0.5");
  RC_LOG() << isa_name(isa) << ": " << testing::describe(row) << "\n";
  RC_ASSERT(testing::row_passes(row));
}

}  // namespace
}  // namespace cpattn
