// The kernel's one validation layer: checks every argument of a public kernel call and returns
// the plain Problem the drivers run on (kernels never re-check).
#pragma once

#include "kernel/problem.h"

namespace cpattn::detail {

/// Validates the inputs, params and options shared by forward and backward (q/k/v shapes,
/// dtypes (one for all three: Error(kInvalidArgument) naming each tensor's dtype) and strides,
/// positions, documents, scale, window, dropout_p, num_threads) and resolves the ISA (resolve_isa:
/// Error(kInvalidArgument) for one the CPU lacks). Throws like validate_forward.
Problem validate_inputs(const AttentionInputs& in, const AttentionParams& params, RngState rng,
                        const KernelOptions& options);

/// Validates a forward call. Throws Error(kShapeMismatch) for a wrong shape, stride or span length
/// and Error(kInvalidArgument) for a bad value (negative position, NaN scale, dropout_p outside
/// [0, 1), window < -1, num_threads < 1, null data with non-zero size), naming expected vs got;
/// Error(kShapeMismatch) for an output with a stride-0 dimension of size > 1 (overlapping writes).
/// The carry's spans must be of length B * Hq * Sq unless it is an ordinary call (both empty,
/// resume false, finish true). out is of the inputs' dtype or fp32 (fp32 only, when the carry
/// resumes or does not finish); Error(kInvalidArgument) otherwise.
ForwardProblem validate_forward(const AttentionInputs& in, const AttentionParams& params,
                                RngState rng, View out, std::span<float> lse,
                                const SoftmaxCarry& carry, const KernelOptions& options);

/// Validates attention_kernel_delta's arguments: dout readable, out of dout's shape, delta of
/// length B * Hq * Sq. Throws Error(kShapeMismatch | kInvalidArgument) naming expected vs got.
void validate_delta(ConstView dout, ConstView out, std::span<float> delta);

/// Validates a backward call like validate_forward, plus dout/out/dq/dk/dv shapes and dtypes (dout
/// of the inputs' dtype; out, dq, dk, dv of it or fp32) and the lse and delta span lengths.
BackwardProblem validate_backward(const AttentionInputs& in, const AttentionParams& params,
                                  RngState rng, ConstView dout, ConstView out,
                                  std::span<const float> lse, View dq, View dk, View dv,
                                  const BackwardOptions& options);

}  // namespace cpattn::detail
