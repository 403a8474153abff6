// Picks the ISA copy of the kernel's hot code (kernel/tile_plan.h: isa_kernels). Compiled without
// ISA flags; resolve_isa (isa.cpp) has checked that the CPU runs the copy.
#include "cpattn/error.h"
#include "kernel/isa/table.h"
#include "kernel/tile_plan.h"

namespace cpattn::detail {

IsaKernels isa_kernels(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return generic::kernels();
    case Isa::kAvx2:
#ifdef CPATTN_KERNEL_HAVE_AVX2
      return avx2::kernels();
#else
      break;
#endif
    case Isa::kAvx512:
#ifdef CPATTN_KERNEL_HAVE_AVX512
      return avx512::kernels();
#else
      break;
#endif
    case Isa::kAvx512Bf16:
#ifdef CPATTN_KERNEL_HAVE_AVX512BF16
      return avx512bf16::kernels();
#else
      break;
#endif
    case Isa::kAuto:
      break;
  }
  throw Error(ErrorCode::kInternal, str_cat("isa_kernels: no kernel copy for ", isa_name(isa)));
}

}  // namespace cpattn::detail
