// Between torch tensors and cpattn: strided views of torch's memory (no copies, any strides) and
// torch tensors over memory cpattn owns (the buffers stay where cpattn allocated and counted them).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <span>

#include "cpattn/tensor.h"

namespace cpattn::torch_binding {

/// A [B, S, H, D] float32, bfloat16 or float16 CPU tensor as a ConstView of its memory (its own
/// strides and dtype, no copy). Throws Error(kInvalidArgument) naming `name` for another dtype or
/// device, Error(kShapeMismatch) for another rank or a negative stride.
ConstView view_of(const at::Tensor& t, const char* name);

/// A contiguous float32 CPU tensor's elements (lse [B, H, S]); throws like view_of, and
/// Error(kShapeMismatch) when it is not contiguous or does not have `dims` dimensions.
std::span<const float> floats_of(const at::Tensor& t, const char* name, int64_t dims);

/// A torch tensor over `data` (elements of `dtype`) with cpattn's dense BSHD layout of `shape`,
/// keeping `owner` alive until torch frees the tensor.
at::Tensor torch_over(const std::shared_ptr<void>& owner, const float* data,
                      std::span<const int64_t> shape, DType dtype = DType::kF32);

/// A torch tensor that takes over a cpattn Tensor (same shape and dtype, dense row-major).
at::Tensor torch_from(Tensor&& t);

}  // namespace cpattn::torch_binding
