// The strategies behind cp_forward / cp_backward (cpattn/detail/cp.h) other than the ring
// (cp/ring_core.h), each on a validated call (validate_cp_call).
#pragma once

#include <span>

#include "cp/ring_detail.h"
#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"

namespace cpattn::detail {

detail::CpForwardResult allgather_forward(const CpCall& c);
AttentionGradients allgather_backward(const CpCall& c, const BackwardState& s);
detail::CpForwardResult ulysses_forward(const CpCall& c);
AttentionGradients ulysses_backward(const CpCall& c, const BackwardState& s);
detail::CpForwardResult hybrid_forward(const CpCall& c);
AttentionGradients hybrid_backward(const CpCall& c, const BackwardState& s);

}  // namespace cpattn::detail
