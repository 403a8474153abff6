// Timing hooks for bench/torch_bench.py (bench_hooks.cpp).
#pragma once

#include <ATen/ATen.h>

namespace cpattn::torch_binding {

/// Seconds of one attention_kernel_forward + attention_kernel_backward on these BSHD tensors
/// (positions 0..S-1, default scale, no dropout) with `num_threads` kernel threads.
double time_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& dout, bool causal, int num_threads);

/// Seconds of one checked forward + backward over `cp_size` in-process ranks (one kernel thread
/// each, zigzag), from a barrier to a barrier, of the whole-sequence tensors given.
double time_inprocess_ring(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& dout, int cp_size, bool causal);

}  // namespace cpattn::torch_binding
