// The forward work item of one ISA copy (the driver is kernel/forward.cpp).
#pragma once

#include <cstdint>

#include "kernel/tile_plan.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// Runs work item `item` of the plan (kernel/tile_plan.h: ForwardPlan) with the worker's scratch
/// buffer (plan.at's layout, 64-byte aligned): writes the out rows and lse of its q tile and heads
/// (or, for a SoftmaxCarry that does not finish, O and the carry's rows).
void forward_item(const ForwardPlan& plan, int64_t item, float* scratch);

}  // namespace cpattn::detail::CPATTN_ISA_NS
