// The instruction-throughput measurement behind the bf16 path choice (cpattn/isa.h:
// bf16_dot_rate): vdpbf16ps against vfmadd231ps on the same registers, in the avx512bf16 copy.
#pragma once

namespace cpattn::detail::CPATTN_ISA_NS {

/// vdpbf16ps instructions per vfmadd231ps instruction this core retires when both run
/// independent chains (12 accumulators, best of 7 alternated timings of ~50 microseconds each):
/// about 1 where the dot product runs at the FMA rate (AMD Zen 4/5), 0.25 on Intel Emerald Rapids
/// (one per two cycles against two FMAs per cycle). 0 in copies without AVX512_BF16.
double bf16_dot_vs_fma_rate();

}  // namespace cpattn::detail::CPATTN_ISA_NS
