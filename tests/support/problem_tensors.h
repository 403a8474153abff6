// fp32 BSHD tensors of a reference::Problem, for tests that call the kernel API directly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cpattn/kernel.h"
#include "cpattn/tensor.h"
#include "verify/reference_case.h"

namespace cpattn::testing {

/// The problem's q, k, v, dout as BSHD tensors and AttentionInputs viewing them. The problem
/// must outlive this object (its positions and documents are viewed, not copied).
struct ProblemTensors : reference::ProblemTensors {
  explicit ProblemTensors(const reference::Problem& p);
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
