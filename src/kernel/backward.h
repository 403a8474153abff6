// The backward driver (FlashAttention-2 Alg. 2 over classified tiles).
#pragma once

#include "kernel/problem.h"

namespace cpattn::detail {

/// Computes dq, dk, dv of a validated backward problem (kernel.h: attention_kernel_backward).
void run_backward(const BackwardProblem& p);

}  // namespace cpattn::detail
