// ISA detection and resolution (cpattn/isa.h). Compiled without ISA flags, like everything outside
// src/kernel/isa/, so a CPU with only the baseline instruction set can load and run it.
#include "cpattn/isa.h"

#include <cstdlib>
#include <string>
#include <string_view>

#include "cpattn/error.h"

namespace cpattn {

namespace {

// Which per-ISA copies of src/kernel/isa/ this build contains (src/CMakeLists.txt).
constexpr bool compiled(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
#ifdef CPATTN_KERNEL_HAVE_AVX2
      return true;
#else
      return false;
#endif
    case Isa::kAvx512:
#ifdef CPATTN_KERNEL_HAVE_AVX512
      return true;
#else
      return false;
#endif
    case Isa::kAvx512Bf16:
#ifdef CPATTN_KERNEL_HAVE_AVX512BF16
      return true;
#else
      return false;
#endif
    case Isa::kAuto:
      return false;
  }
  return false;
}

// Whether the CPU can run a path. GCC's __builtin_cpu_supports reads CPUID once (libgcc) and
// reports AVX/AVX-512 features only when XCR0 says the operating system saves their registers.
bool cpu_supports(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case Isa::kAvx512Bf16:
      return cpu_supports(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
    case Isa::kAuto:
      return false;
  }
  return false;
#else
  return isa == Isa::kGeneric;
#endif
}

bool available(Isa isa) { return compiled(isa) && cpu_supports(isa); }

constexpr Isa kPaths[] = {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16};

std::string available_names() {
  std::string s;
  for (Isa isa : kPaths) {
    if (!available(isa)) continue;
    if (!s.empty()) s += ", ";
    s += isa_name(isa);
  }
  return s;
}

Isa checked(Isa isa, std::string_view what) {
  CPATTN_CHECK(available(isa), ErrorCode::kInvalidArgument, what, isa_name(isa), ": this ",
               compiled(isa) ? "CPU" : "build",
               " does not support it (available: ", available_names(), ")");
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::kAuto:
      return "auto";
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

Isa detected_isa() noexcept {
  Isa best = Isa::kGeneric;
  for (Isa isa : kPaths) {
    if (available(isa)) best = isa;
  }
  return best;
}

std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kPaths) {
    if (available(isa)) isas.push_back(isa);
  }
  return isas;
}

Isa resolve_isa(Isa requested) {
  if (requested != Isa::kAuto) return checked(requested, "Isa ");
  const char* env = std::getenv("CPATTN_ISA");
  if (env == nullptr) return detected_isa();
  const std::string_view value(env);
  if (value.empty() || value == "auto") return detected_isa();
  for (Isa isa : kPaths) {
    if (value == isa_name(isa)) return checked(isa, "CPATTN_ISA=");
  }
  throw Error(
      ErrorCode::kInvalidArgument,
      detail::str_cat("CPATTN_ISA=", value,
                      ": expected one of auto, generic, avx2, avx512, avx512bf16 (available here: ",
                      available_names(), ")"));
}

}  // namespace cpattn
