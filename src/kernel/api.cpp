// The public kernel entry points (kernel.h): validate once (which also resolves the ISA), then run
// the forward or backward driver; the allocating overloads return BSHD-contiguous, counted
// Tensors.
#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "kernel/backward.h"
#include "kernel/forward.h"
#include "kernel/validate.h"

namespace cpattn {

void attention_kernel_forward(const AttentionInputs& in, const AttentionParams& params,
                              RngState rng, View out, std::span<float> lse,
                              const KernelOptions& options) {
  attention_kernel_forward(in, params, rng, out, lse, SoftmaxCarry{}, options);
}

void attention_kernel_forward(const AttentionInputs& in, const AttentionParams& params,
                              RngState rng, View out, std::span<float> lse,
                              const SoftmaxCarry& carry, const KernelOptions& options) {
  detail::run_forward(detail::validate_forward(in, params, rng, out, lse, carry, options));
}

void attention_kernel_backward(const AttentionInputs& in, const AttentionParams& params,
                               RngState rng, ConstView dout, ConstView out,
                               std::span<const float> lse, View dq, View dk, View dv,
                               const BackwardOptions& options) {
  detail::run_backward(
      detail::validate_backward(in, params, rng, dout, out, lse, dq, dk, dv, options));
}

void attention_kernel_delta(ConstView dout, ConstView out, std::span<float> delta,
                            const KernelOptions& options) {
  detail::validate_delta(dout, out, delta);
  CPATTN_CHECK(options.num_threads >= 1, ErrorCode::kInvalidArgument,
               "num_threads must be >= 1, got ", options.num_threads);
  const Isa isa = resolve_isa(options.isa);
  const std::function<void()>* interrupt =
      options.interruption_point ? &options.interruption_point : nullptr;
  detail::run_delta(dout, out, delta, options.num_threads, interrupt, isa);
}

KernelForwardResult attention_kernel_forward(const AttentionInputs& in,
                                             const AttentionParams& params, RngState rng,
                                             const KernelOptions& options) {
  // Sizes come from the inputs; validate_inputs rejects negative dims before we allocate.
  const detail::Problem p = detail::validate_inputs(in, params, rng, options);
  // Not zero-filled: the forward writes every row of out and lse.
  KernelForwardResult r{Tensor::uninitialized({p.B, p.Sq, p.Hq, p.Dv}),
                        Tensor::uninitialized({p.B, p.Hq, p.Sq})};
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
                       Tensor({p.B, p.Sk, p.Hkv, p.Dv}),
                       Tensor({p.sink.empty() ? 0 : p.dropout_heads})};
  BackwardOptions bwd;
  bwd.kernel = options;
  bwd.dsink = g.dsink.span();
  attention_kernel_backward(in, params, rng, dout, out, lse, g.dq.view(), g.dk.view(), g.dv.view(),
                            bwd);
  return g;
}

}  // namespace cpattn
