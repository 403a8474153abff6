// The public kernel entry points (kernel.h): validate once, then run the forward or backward
// driver; the allocating overloads return BSHD-contiguous, counted Tensors.
#include "cpattn/kernel.h"
#include "kernel/backward.h"
#include "kernel/forward.h"
#include "kernel/validate.h"

namespace cpattn {

void attention_kernel_forward(const AttentionInputs& in, const AttentionParams& params,
                              RngState rng, View out, std::span<float> lse,
                              const KernelOptions& options) {
  detail::run_forward(detail::validate_forward(in, params, rng, out, lse, options));
}

void attention_kernel_backward(const AttentionInputs& in, const AttentionParams& params,
                               RngState rng, ConstView dout, ConstView out,
                               std::span<const float> lse, View dq, View dk, View dv,
                               const BackwardOptions& options) {
  detail::run_backward(
      detail::validate_backward(in, params, rng, dout, out, lse, dq, dk, dv, options));
}

KernelForwardResult attention_kernel_forward(const AttentionInputs& in,
                                             const AttentionParams& params, RngState rng,
                                             const KernelOptions& options) {
  // Sizes come from the inputs; validate_inputs rejects negative dims before we allocate.
  const detail::Problem p = detail::validate_inputs(in, params, rng, options);
  KernelForwardResult r{Tensor({p.B, p.Sq, p.Hq, p.Dv}), Tensor({p.B, p.Hq, p.Sq})};
  attention_kernel_forward(in, params, rng, r.out.view(), r.lse.span(), options);
  return r;
}

AttentionGradients attention_kernel_backward(const AttentionInputs& in,
                                             const AttentionParams& params, RngState rng,
                                             ConstView dout, ConstView out,
                                             std::span<const float> lse,
                                             const KernelOptions& options) {
  const detail::Problem p = detail::validate_inputs(in, params, rng, options);
  AttentionGradients g{Tensor({p.B, p.Sq, p.Hq, p.Dqk}), Tensor({p.B, p.Sk, p.Hkv, p.Dqk}),
                       Tensor({p.B, p.Sk, p.Hkv, p.Dv})};
  BackwardOptions bwd;
  bwd.num_threads = options.num_threads;
  attention_kernel_backward(in, params, rng, dout, out, lse, g.dq.view(), g.dk.view(), g.dv.view(),
                            bwd);
  return g;
}

}  // namespace cpattn
