// fp32 BSHD tensors of a reference::Problem, for tests that call the kernel API directly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cpattn/kernel.h"
#include "cpattn/tensor.h"
#include "kernel/reference.h"

namespace cpattn::testing {

/// A BSHD fp32 tensor of `shape` holding x rounded to float.
Tensor bshd_tensor(const std::vector<double>& x, const std::array<int64_t, 4>& shape);

/// A tensor's values widened to double (storage order).
std::vector<double> to_doubles(const Tensor& t);
std::vector<double> to_doubles(std::span<const float> x);

/// The problem's q, k, v, dout as BSHD tensors and AttentionInputs viewing them. The problem
/// must outlive this object (its positions and documents are viewed, not copied).
struct ProblemTensors {
  explicit ProblemTensors(const reference::Problem& p);
  Tensor q, k, v, dout;
  AttentionInputs inputs;
  /// Fresh zero BSHD tensors shaped like out [B, Sq, Hq, Dv], q, k and v.
  Tensor new_out() const;
  Tensor new_like_q() const;
  Tensor new_like_k() const;
  Tensor new_like_v() const;
  /// lse-sized zero buffer [B, Hq, Sq].
  std::vector<float> new_lse() const;

 private:
  reference::Dims dims_;
};

}  // namespace cpattn::testing
