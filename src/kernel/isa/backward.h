// The backward work item of one ISA copy (the driver is kernel/backward.cpp).
#pragma once

#include <cstdint>

#include "kernel/tile_plan.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// Runs work item `item` of the plan (kernel/tile_plan.h: BackwardPlan) with the worker's scratch
/// buffer (plan.at's layout, 64-byte aligned): writes the dk/dv rows of its k tiles and its dq
/// contributions (straight into dq with one chunk, else into the chunk's partial rows).
void backward_item(const BackwardPlan& plan, int64_t item, float* scratch);

}  // namespace cpattn::detail::CPATTN_ISA_NS
