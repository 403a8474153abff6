// The backward driver (FlashAttention-2 Alg. 2 over classified tiles) and the D_i pass.
#pragma once

#include <functional>
#include <span>

#include "kernel/problem.h"

namespace cpattn::detail {

/// Computes dq, dk, dv of a validated backward problem (kernel.h: attention_kernel_backward).
void run_backward(const BackwardProblem& p);

/// delta[(b * H + h) * S + i] = <dout(b, i, h, :), out(b, i, h, :)> on up to num_threads workers
/// with the ISA copy `isa` (resolved); shapes validated (validate_delta).
void run_delta(ConstView dout, ConstView out, std::span<float> delta, int num_threads,
               const std::function<void()>* interrupt, Isa isa);

}  // namespace cpattn::detail
