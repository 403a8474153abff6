// fp32 tensors of a reference::Problem (problem_tensors.h).
#include "support/problem_tensors.h"

#include <utility>

namespace cpattn::testing {

ProblemTensors::ProblemTensors(const reference::Problem& p)
    : reference::ProblemTensors(p), dims_(p.dims) {
  inputs = {std::as_const(q).view(),
            std::as_const(k).view(),
            std::as_const(v).view(),
            p.q_pos,
            p.k_pos,
            p.q_doc,
            p.k_doc};
}

Tensor ProblemTensors::new_out() const { return Tensor({dims_.B, dims_.Sq, dims_.Hq, dims_.Dv}); }
Tensor ProblemTensors::new_like_q() const {
  return Tensor({dims_.B, dims_.Sq, dims_.Hq, dims_.Dqk});
}
Tensor ProblemTensors::new_like_k() const {
  return Tensor({dims_.B, dims_.Sk, dims_.Hkv, dims_.Dqk});
}
Tensor ProblemTensors::new_like_v() const {
  return Tensor({dims_.B, dims_.Sk, dims_.Hkv, dims_.Dv});
}
std::vector<float> ProblemTensors::new_lse() const {
  return std::vector<float>(static_cast<size_t>(dims_.B * dims_.Hq * dims_.Sq));
}

}  // namespace cpattn::testing
