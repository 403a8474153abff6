// fp32 tensors of a reference::Problem (problem_tensors.h).
#include "support/problem_tensors.h"

#include <utility>

namespace cpattn::testing {

Tensor bshd_tensor(const std::vector<double>& x, const std::array<int64_t, 4>& shape) {
  Tensor t({shape[0], shape[1], shape[2], shape[3]});
  for (size_t i = 0; i < x.size() && i < static_cast<size_t>(t.numel()); ++i) {
    t.data()[i] = static_cast<float>(x[i]);
  }
  return t;
}

std::vector<double> to_doubles(const Tensor& t) { return to_doubles(t.span()); }

std::vector<double> to_doubles(std::span<const float> x) {
  return std::vector<double>(x.begin(), x.end());
}

ProblemTensors::ProblemTensors(const reference::Problem& p) : dims_(p.dims) {
  const reference::Dims& d = p.dims;
  q = bshd_tensor(p.q, {d.B, d.Sq, d.Hq, d.Dqk});
  k = bshd_tensor(p.k, {d.B, d.Sk, d.Hkv, d.Dqk});
  v = bshd_tensor(p.v, {d.B, d.Sk, d.Hkv, d.Dv});
  dout = bshd_tensor(p.dout, {d.B, d.Sq, d.Hq, d.Dv});
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
