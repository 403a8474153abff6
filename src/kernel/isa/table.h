// The entry-point table of every ISA copy, declared for the dispatcher (kernel/dispatch.cpp).
// Unlike the rest of src/kernel/isa/, this header is also read by baseline code: it declares one
// function per copy and defines nothing.
#pragma once

#include "kernel/tile_plan.h"

namespace cpattn::detail {
namespace generic {
/// The generic copy's entry points.
IsaKernels kernels();
}  // namespace generic
namespace avx2 {
/// The AVX2 + FMA copy's entry points (defined when CPATTN_KERNEL_HAVE_AVX2).
IsaKernels kernels();
}  // namespace avx2
namespace avx512 {
/// The AVX-512 copy's entry points (defined when CPATTN_KERNEL_HAVE_AVX512).
IsaKernels kernels();
}  // namespace avx512
namespace avx512bf16 {
/// The AVX-512 + AVX512_BF16 copy's entry points (defined when CPATTN_KERNEL_HAVE_AVX512BF16).
IsaKernels kernels();
}  // namespace avx512bf16
}  // namespace cpattn::detail
