// Which instruction set the kernel runs on (docs/design.md section 3, "Runtime dispatch"). The
// kernel's hot parts are compiled once per ISA and one copy is chosen per call: the best one the
// CPU runs fastest, unless KernelOptions::isa or the CPATTN_ISA environment variable asks for
// another. Every call resolves its own choice; the one thing decided once per process is a fact
// about the CPU (bf16_dot_rate).
#pragma once

#include <string>
#include <vector>

#include "cpattn/dtype.h"

namespace cpattn {

/// The ISA table: the kernel's code paths, narrowest first, one row each. It is the one list of
/// paths; everything else derives from it: the Isa enumerators, isa_name, kIsaPaths (below), the
/// build's per-ISA copies and their compiler flags (cmake/isa.cmake reads this table), which
/// copies this build contains and their dispatch (src/kernel/dispatch.cpp), the CPU check
/// (src/kernel/isa.cpp), the kernel numerics class and the tests that run on every path. A row is
///   X(enumerator, name, fp32 lanes, features)
/// where `name` is the copy's namespace cpattn::detail::<name> and the CPATTN_ISA value,
/// `lanes` its vector width, and `features` a run of F(<feature>), each both a GCC target flag
/// (-m<feature>, given to that copy only) and a __builtin_cpu_supports name (the CPU runs the
/// path when it reports every feature; GCC reports AVX and AVX-512 features only when XCR0 says
/// the operating system saves their registers). Adding a path is adding its row and, where it
/// needs other code than the row's width and flags give, that code under src/kernel/isa/.
///   generic     portable C++ vectors, no FMA: runs on any CPU (baseline x86-64: SSE2)
///   avx2        AVX2 + FMA
///   avx512      AVX-512 F/BW/VL/DQ + FMA
///   avx512bf16  avx512 plus AVX-512-BF16: bf16 calls run their bf16 x bf16 products on vdpbf16ps
///               (two products per fp32 lane and instruction, fp32 accumulation; P rounded to bf16
///               before P V, Z P and dS before the backward's dV, dK and dQ; bf16 denormal inputs
///               count as zero, as the instruction defines;
///               docs/design.md section 3); fp32 and fp16 calls run exactly avx512's code and give
///               its bits. The one copy compiled with avx512bf16 (src/kernel/isa/simd.h).
// clang-format off
#define CPATTN_ISA_TABLE(X, F)                                                                \
  X(kGeneric,    generic,    4,  )                                                            \
  X(kAvx2,       avx2,       8,  F(avx2) F(fma))                                              \
  X(kAvx512,     avx512,     16, F(avx512f) F(avx512bw) F(avx512vl) F(avx512dq) F(fma))       \
  X(kAvx512Bf16, avx512bf16, 16, F(avx512f) F(avx512bw) F(avx512vl) F(avx512dq) F(fma)        \
                                 F(avx512bf16))
// clang-format on

/// A kernel code path: a row of CPATTN_ISA_TABLE, or kAuto, a request ("resolve for me": the
/// CPATTN_ISA environment variable when set, else fastest_isa()), never the path that runs.
enum class Isa {
  kAuto,
#define CPATTN_ISA_ENUMERATOR(isa, name, lanes, features) isa,
  CPATTN_ISA_TABLE(CPATTN_ISA_ENUMERATOR, )
#undef CPATTN_ISA_ENUMERATOR
};

/// Every path of the table, narrowest first, whether this build and CPU have it or not.
inline constexpr Isa kIsaPaths[] = {
#define CPATTN_ISA_PATH(isa, name, lanes, features) Isa::isa,
    CPATTN_ISA_TABLE(CPATTN_ISA_PATH, )
#undef CPATTN_ISA_PATH
};

/// "auto", then the table's names ("generic", "avx2", "avx512", "avx512bf16"): the names
/// CPATTN_ISA accepts.
const char* isa_name(Isa isa) noexcept;

/// The widest path this build contains and this CPU (and its operating system, which must save
/// the wider registers: XCR0) supports, from CPUID: the last row of the table whose features the
/// CPU reports (kAvx512Bf16's AVX512_BF16 is CPUID.(EAX=7, ECX=1).EAX[5]); kGeneric always
/// works. Never kAuto.
Isa detected_isa() noexcept;

/// Every path this build contains that this CPU supports, from kGeneric up to detected_isa().
std::vector<Isa> available_isas();

/// How fast this CPU runs AVX512_BF16's vdpbf16ps next to its fp32 FMAs, and how that was decided.
/// vdpbf16ps does two bf16 products per fp32 lane: at the FMA instruction rate (AMD Zen 4, Zen 5)
/// bf16 products run at twice the fp32 rate and kAvx512Bf16 is the fastest path for bf16 calls.
/// Intel Sapphire and Emerald Rapids retire one per two cycles against two FMAs per cycle (a
/// quarter of the instruction rate, half the flop rate, "half rate" below): there widening bf16 to
/// fp32 while packing (kAvx512) is faster, 1.19x forward and 1.27x backward (docs/performance.md).
struct Bf16DotRate {
  bool full_rate = false;  ///< vdpbf16ps at >= 3/4 of the FMA instruction rate
  double measured = 0.0;   ///< vdpbf16ps / vfmadd231ps instructions when measured, else 0
  std::string source;      ///< how it was decided, e.g. "AMD family 0x1a (Zen 5): full rate"
};

/// This CPU's Bf16DotRate, decided at the first call and the same for every later one in the
/// process: from the table of known micro-architectures (AMD family 0x19 and 0x1a: full rate;
/// Intel family 6 models 0x8f and 0xcf, Sapphire and Emerald Rapids: half rate), else by a ~1 ms
/// measurement of both instructions' throughput on the calling core (full rate at a ratio >= 0.75;
/// measured ratios are ~1.0 and ~0.25). Without AVX512_BF16 (or the avx512bf16 copy in this build):
/// {false, 0, "no AVX512_BF16"}.
const Bf16DotRate& bf16_dot_rate();

/// The path kAuto resolves to when CPATTN_ISA does not name one: detected_isa(), except kAvx512
/// in place of kAvx512Bf16 when bf16_dot_rate() is not full rate (fp32 and fp16 calls run the same
/// code on both, so only bf16 calls, which are faster widened there, see the difference).
Isa fastest_isa();

/// The path a call with `requested` runs: an explicit ISA is returned as is when available;
/// kAuto becomes the value of the CPATTN_ISA environment variable ("generic", "avx2", "avx512",
/// "avx512bf16", or "auto" / empty for fastest_isa()) when it is set, else fastest_isa(). Read on
/// every call. Throws Error(kInvalidArgument) for an ISA this CPU or build lacks
/// ("CPATTN_ISA=avx512: this CPU supports only generic, avx2") and for a CPATTN_ISA value outside
/// the accepted names (naming them).
Isa resolve_isa(Isa requested);

/// Whether this CPU and operating system expose AMX-BF16 (Intel's tile matrix unit) to this
/// process. cpattn has no AMX kernel (no machine it is tested on exposes AMX; docs/performance.md,
/// "AMX", says how one would slot into the dispatch): this is reported (cpattn --version), never
/// used, and reading it changes nothing (no permission is requested).
struct AmxSupport {
  bool cpu = false;        ///< CPUID.(EAX=7, ECX=0).EDX: AMX-TILE (bit 24) and AMX-BF16 (bit 22)
  bool os_state = false;   ///< XCR0 bits 17 and 18: the OS saves the tile configuration and data
  bool permitted = false;  ///< Linux arch_prctl(ARCH_GET_XCOMP_PERM) has tile data (bit 18)
  /// "AMX-BF16 not exposed by this CPU", "AMX-BF16 exposed; tile data permission not requested",
  /// ...: one phrase for --version.
  std::string summary() const;
};

/// Reads AmxSupport from CPUID, XCR0 and the kernel (read-only; all false off x86-64 Linux).
AmxSupport amx_support();

/// The arithmetic a path gives a call of one dtype, as far as it decides the bits of the results:
/// paths of one class give bitwise equal results (the kernel tests check it), paths of different
/// classes do not. A forward's class is part of its Fingerprint, so a backward or a recompute
/// that would run other arithmetic (another CPATTN_ISA, another rank's CPU) is refused.
enum class KernelNumerics {
  kNoFma,    ///< a path without the fma feature (generic): every a * b + c rounds twice
  kFma,      ///< the fma paths (avx2, avx512; avx512bf16's fp32, fp16 calls): fused multiply-adds
  kBf16Dot,  ///< avx512bf16 feature, bf16 calls: vdpbf16ps products, P rounded to bf16 before P V
};

/// The class of a resolved path (not kAuto) for q/k/v of `dtype`, from its row's features.
KernelNumerics kernel_numerics(Isa path, DType dtype) noexcept;

/// "no-fma", "fma", "bf16-dot".
const char* kernel_numerics_name(KernelNumerics numerics) noexcept;

}  // namespace cpattn
