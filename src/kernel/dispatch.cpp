// Picks the ISA copy of the kernel's hot code (kernel/tile_plan.h: isa_kernels). Compiled without
// ISA flags; resolve_isa (isa.cpp) has checked that the CPU runs the copy.
#include "cpattn/error.h"
#include "cpattn_compiled_isas.h"
#include "kernel/isa/table.h"
#include "kernel/tile_plan.h"

namespace cpattn::detail {

IsaKernels isa_kernels(Isa isa) {
  switch (isa) {
#define CPATTN_DISPATCH(path, name) \
  case Isa::path:                   \
    return name::kernels();
    CPATTN_COMPILED_ISAS(CPATTN_DISPATCH)
#undef CPATTN_DISPATCH
    default:  // kAuto, or a row this build has no copy of
      break;
  }
  throw Error(ErrorCode::kInternal, str_cat("isa_kernels: no kernel copy for ", isa_name(isa)));
}

}  // namespace cpattn::detail
