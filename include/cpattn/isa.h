// Which instruction set the kernel runs on (docs/design.md section 3, "Runtime dispatch"). The
// kernel's hot parts are compiled once per ISA and one copy is chosen per call: the best one the
// CPU supports, unless KernelOptions::isa or the CPATTN_ISA environment variable asks for another.
// Nothing here is global mutable state: every call resolves its own choice.
#pragma once

#include <vector>

namespace cpattn {

/// A kernel code path. kAuto is a request ("resolve for me"), never the path that runs.
enum class Isa {
  kAuto,     ///< CPATTN_ISA when set, else detected_isa()
  kGeneric,  ///< portable C++ vectors (4 lanes), no FMA: runs on any CPU (baseline x86-64: SSE2)
  kAvx2,     ///< AVX2 + FMA, 8 fp32 lanes
  kAvx512,   ///< AVX-512 F/BW/VL/DQ (+ FMA), 16 fp32 lanes
  /// kAvx512 plus AVX-512-BF16: bf16 calls run their bf16 x bf16 products on vdpbf16ps (two
  /// products per fp32 lane and instruction, fp32 accumulation; P rounded to bf16 before P V;
  /// bf16 denormal inputs count as zero, as the instruction defines; docs/design.md section 3);
  /// fp32 and fp16 calls run exactly kAvx512's code and give its bits.
  kAvx512Bf16,
};

/// "auto", "generic", "avx2", "avx512", "avx512bf16": the names CPATTN_ISA accepts.
const char* isa_name(Isa isa) noexcept;

/// The best path this build contains and this CPU (and its operating system, which must save
/// the wider registers: XCR0) supports, from CPUID: kAvx512Bf16 needs kAvx512's features and
/// AVX512_BF16 (CPUID.(EAX=7, ECX=1).EAX[5]); kAvx512 needs AVX-512 F, BW, VL, DQ and FMA;
/// kAvx2 needs AVX2 and FMA; kGeneric always works. Never kAuto.
Isa detected_isa() noexcept;

/// Every path this build contains that this CPU supports, from kGeneric up to detected_isa().
std::vector<Isa> available_isas();

/// The path a call with `requested` runs: an explicit ISA is returned as is when available;
/// kAuto becomes the value of the CPATTN_ISA environment variable ("generic", "avx2", "avx512",
/// "avx512bf16", or "auto" / empty for detected_isa()) when it is set, else detected_isa(). Read on
/// every call. Throws Error(kInvalidArgument) for an ISA this CPU or build lacks
/// ("CPATTN_ISA=avx512: this CPU supports only generic, avx2") and for a CPATTN_ISA value outside
/// the accepted names (naming them).
Isa resolve_isa(Isa requested);

}  // namespace cpattn
