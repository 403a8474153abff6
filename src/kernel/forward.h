// The forward driver (FlashAttention-2 online softmax over classified tiles).
#pragma once

#include "kernel/problem.h"

namespace cpattn::detail {

/// Computes out and lse of a validated forward problem (kernel.h: attention_kernel_forward).
void run_forward(const ForwardProblem& p);

}  // namespace cpattn::detail
