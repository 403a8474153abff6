// The entry-point table of every ISA copy, declared for the dispatcher (kernel/dispatch.cpp).
// Unlike the rest of src/kernel/isa/, this header is also read by baseline code: it declares one
// function per copy and defines nothing.
#pragma once

#include "cpattn/isa.h"
#include "kernel/tile_plan.h"

namespace cpattn::detail {

/// cpattn::detail::<name>::kernels(), for every row of the ISA table (cpattn/isa.h): the copy's
/// entry points, defined by its table.cpp when this build compiles the copy (cmake/isa.cmake): a
/// constant table, so looking it up runs none of the copy's instructions.
#define CPATTN_DECLARE_COPY(path, name, lanes, features) \
  namespace name {                                       \
  const IsaKernels& kernels();                           \
  }
CPATTN_ISA_TABLE(CPATTN_DECLARE_COPY, )
#undef CPATTN_DECLARE_COPY

}  // namespace cpattn::detail
