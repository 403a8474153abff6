// ISA detection and resolution (cpattn/isa.h). Compiled without ISA flags, like everything outside
// src/kernel/isa/, so a CPU with only the baseline instruction set can load and run it.
#include "cpattn/isa.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpattn/error.h"
#include "cpattn_compiled_isas.h"
#include "kernel/tile_plan.h"

namespace cpattn {

namespace {

// Which rows of the ISA table this build compiled a copy of (cmake/isa.cmake).
constexpr bool compiled(Isa isa) {
#define CPATTN_IS_COMPILED(path, name) || isa == Isa::path
  return false CPATTN_COMPILED_ISAS(CPATTN_IS_COMPILED);
#undef CPATTN_IS_COMPILED
}

// A path's row features as text, " avx512f avx512bw ..." ("" for kAuto and featureless rows).
constexpr std::string_view features_of(Isa isa) {
#define CPATTN_FEATURE_TEXT(feature) " " #feature
#define CPATTN_FEATURES_OF(path, name, lanes, features) \
  if (isa == Isa::path) return "" features;
  CPATTN_ISA_TABLE(CPATTN_FEATURES_OF, CPATTN_FEATURE_TEXT)
#undef CPATTN_FEATURES_OF
#undef CPATTN_FEATURE_TEXT
  return "";
}

// Whether a path's row lists `feature`.
constexpr bool has_feature(Isa isa, std::string_view feature) {
  std::string_view rest = features_of(isa);
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the space before each feature
    const std::string_view word = rest.substr(0, rest.find(' '));
    if (word == feature) return true;
    rest.remove_prefix(word.size());
  }
  return false;
}

// Whether the CPU can run a path: it reports every feature of the path's row. GCC's
// __builtin_cpu_supports reads CPUID once (libgcc) and reports AVX/AVX-512 features only when
// XCR0 says the operating system saves their registers.
bool cpu_supports(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define CPATTN_CPU_SUPPORTS(feature) &&__builtin_cpu_supports(#feature)
#define CPATTN_CPU_RUNS(path, name, lanes, features) \
  if (isa == Isa::path) return true features;
  CPATTN_ISA_TABLE(CPATTN_CPU_RUNS, CPATTN_CPU_SUPPORTS)
#undef CPATTN_CPU_RUNS
#undef CPATTN_CPU_SUPPORTS
  return false;
#else
  return isa != Isa::kAuto && features_of(isa).empty();
#endif
}

bool available(Isa isa) { return compiled(isa) && cpu_supports(isa); }

// "generic, avx2, ...": the names of `paths`.
std::string names_of(std::span<const Isa> paths) {
  std::string s;
  for (Isa isa : paths) {
    if (!s.empty()) s += ", ";
    s += isa_name(isa);
  }
  return s;
}

std::string available_names() { return names_of(available_isas()); }

Isa checked(Isa isa, std::string_view what) {
  CPATTN_CHECK(available(isa), ErrorCode::kInvalidArgument, what, isa_name(isa), ": this ",
               compiled(isa) ? "CPU" : "build",
               " does not support it (available: ", available_names(), ")");
  return isa;
}

// The vendor, family and model of CPUID leaves 0 and 1 (family = base + extended family when the
// base is 0xF; model = base + extended model << 4 for families 6 and >= 0xF).
struct CpuModel {
  std::string vendor;
  unsigned family = 0, model = 0;
};

CpuModel cpu_model() {
  CpuModel m;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13] = {};
    __builtin_memcpy(v, &b, 4);
    __builtin_memcpy(v + 4, &d, 4);
    __builtin_memcpy(v + 8, &c, 4);
    m.vendor = v;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    m.family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
    m.model =
        base_family == 6 || base_family == 0xF ? base_model | (((a >> 16) & 0xF) << 4) : base_model;
  }
#endif
  return m;
}

std::string hex(unsigned x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", x);
  return buf;
}

// The table of bf16_dot_rate (isa.h), or nothing for a CPU it does not know.
std::optional<Bf16DotRate> known_rate(const CpuModel& m) {
  const std::string id = m.vendor == "AuthenticAMD"
                             ? "AMD family " + hex(m.family)
                             : "Intel family " + hex(m.family) + " model " + hex(m.model);
  if (m.vendor == "AuthenticAMD" && (m.family == 0x19 || m.family == 0x1A)) {
    return Bf16DotRate{true, 0.0,
                       id + (m.family == 0x19 ? " (Zen 4)" : " (Zen 5)") + ": full rate"};
  }
  if (m.vendor == "GenuineIntel" && m.family == 6 && (m.model == 0x8F || m.model == 0xCF)) {
    return Bf16DotRate{
        false, 0.0,
        id + (m.model == 0x8F ? " (Sapphire Rapids)" : " (Emerald Rapids)") + ": half rate"};
  }
  return std::nullopt;
}

Bf16DotRate decide_bf16_dot_rate() {
  if (!available(Isa::kAvx512Bf16)) return {false, 0.0, "no AVX512_BF16"};
  const CpuModel m = cpu_model();
  if (std::optional<Bf16DotRate> known = known_rate(m)) return *known;
  const double ratio = detail::isa_kernels(Isa::kAvx512Bf16).bf16_dot_vs_fma_rate();
  char text[96];
  std::snprintf(text, sizeof text, "%s family 0x%x model 0x%x, measured %.2f of the FMA rate",
                m.vendor.c_str(), m.family, m.model, ratio);
  return {ratio >= 0.75, ratio, text};
}

}  // namespace

const Bf16DotRate& bf16_dot_rate() {
  // A fact about the CPU, decided once per process so that every call of the process takes the
  // same path (a measurement could otherwise land on either side of the threshold).
  static const Bf16DotRate rate = decide_bf16_dot_rate();
  return rate;
}

Isa fastest_isa() {
  const Isa widest = detected_isa();
  if (widest == Isa::kAvx512Bf16 && !bf16_dot_rate().full_rate) return Isa::kAvx512;
  return widest;
}

AmxSupport amx_support() {
  AmxSupport amx;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) amx.cpu = ((d >> 24) & 1) && ((d >> 22) & 1);
  if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 1)) {  // OSXSAVE: xgetbv may run
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    amx.os_state = ((lo >> 17) & 3) == 3;
  }
#if defined(__linux__)
  constexpr long kArchGetXcompPerm = 0x1022;  // arch/x86/include/uapi/asm/prctl.h
  unsigned long features = 0;
  if (amx.cpu && syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) == 0) {
    amx.permitted = (features >> 18) & 1;
  }
#endif
#endif
  return amx;
}

std::string AmxSupport::summary() const {
  if (!cpu) return "AMX-BF16 not exposed by this CPU";
  if (!os_state) return "AMX-BF16 in CPUID, but the OS does not enable its tile state";
  return permitted ? "AMX-BF16 exposed, tile data permitted (no AMX kernel: unused)"
                   : "AMX-BF16 exposed, tile data permission not requested (no AMX kernel)";
}

KernelNumerics kernel_numerics(Isa path, DType dtype) noexcept {
  // A copy fuses a * b + c only when compiled with -mfma; the one compiled with -mavx512bf16
  // runs bf16 calls on vdpbf16ps (kernel/isa/simd.h: CPATTN_ISA_BF16_DOT).
  if (!has_feature(path, "fma")) return KernelNumerics::kNoFma;
  if (dtype == DType::kBF16 && has_feature(path, "avx512bf16")) return KernelNumerics::kBf16Dot;
  return KernelNumerics::kFma;
}

const char* kernel_numerics_name(KernelNumerics numerics) noexcept {
  switch (numerics) {
    case KernelNumerics::kNoFma:
      return "no-fma";
    case KernelNumerics::kFma:
      return "fma";
    case KernelNumerics::kBf16Dot:
      return "bf16-dot";
  }
  return "?";
}

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::kAuto:
      return "auto";
#define CPATTN_ISA_NAME(path, name, lanes, features) \
  case Isa::path:                                    \
    return #name;
      CPATTN_ISA_TABLE(CPATTN_ISA_NAME, )
#undef CPATTN_ISA_NAME
  }
  return "?";
}

Isa detected_isa() noexcept {
  Isa best = Isa::kGeneric;
  for (Isa isa : kIsaPaths) {
    if (available(isa)) best = isa;
  }
  return best;
}

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kIsaPaths) {
    if (available(isa)) isas.push_back(isa);
  }
  return isas;
}

Isa resolve_isa(Isa requested) {
  if (requested != Isa::kAuto) return checked(requested, "Isa ");
  const char* env = std::getenv("CPATTN_ISA");
  if (env == nullptr) return fastest_isa();
  const std::string_view value(env);
  if (value.empty() || value == "auto") return fastest_isa();
  for (Isa isa : kIsaPaths) {
    if (value == isa_name(isa)) return checked(isa, "CPATTN_ISA=");
  }
  throw Error(ErrorCode::kInvalidArgument,
              detail::str_cat("CPATTN_ISA=", detail::quoted(value), ": expected one of auto, ",
                              names_of(kIsaPaths), " (available here: ", available_names(), ")"));
}

}  // namespace cpattn
