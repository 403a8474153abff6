// Timing hooks for bench/torch_bench.py: the same shapes run by C++ alone, so the benchmark can
// compare cpattn called from Python (autograd, tensor wrapping) and over torch.distributed (gloo)
// with what the engine does without them, in one run. Not part of the package's API.
#include "bench_hooks.h"

#include <vector>

#include "cpattn/attention.h"
#include "cpattn/kernel.h"
#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#include "torch_views.h"

namespace cpattn::torch_binding {

double time_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& dout, bool causal, int num_threads) {
  const ConstView qv = view_of(q, "q"), kv = view_of(k, "k"), vv = view_of(v, "v"),
                  dv = view_of(dout, "dout");
  std::vector<int64_t> pos(static_cast<size_t>(qv.shape[1]));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  AttentionParams params;
  params.causal = causal;
  const Stopwatch watch;
  const AttentionInputs in{qv, kv, vv, pos, pos, {}, {}};
  const KernelForwardResult f = attention_kernel_forward(in, params, {}, {num_threads});
  const AttentionGradients g =
      attention_kernel_backward(in, params, {}, dv, f.out.view(), f.lse.span(), {num_threads});
  return watch.seconds();
}

double time_inprocess_ring(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& dout, int cp_size, bool causal) {
  const ConstView qw = view_of(q, "q"), kw = view_of(k, "k"), vw = view_of(v, "v"),
                  dw = view_of(dout, "dout");
  AttentionParams params;
  params.causal = causal;
  std::vector<double> seconds(static_cast<size_t>(cp_size));
  run_ranks(cp_size, [&](Communicator& comm) {
    const int r = comm.rank();
    const auto seq = SequenceSharding::of(Layout::kZigzag, qw.shape[1], cp_size, r);
    const auto piece = [&](ConstView x) { return shard_tensor(x, seq, r, &comm.memory()); };
    const Tensor qr = piece(qw), kr = piece(kw), vr = piece(vw), dr = piece(dw);
    comm.barrier();
    const Stopwatch watch;
    const ForwardResult f =
        attention_forward(comm, qr.view(), kr.view(), vr.view(), seq, params, {});
    const AttentionGradients g =
        attention_backward(comm, dr.view(), qr.view(), kr.view(), vr.view(), f, seq, params, {});
    comm.barrier();
    seconds[static_cast<size_t>(r)] = watch.seconds();
  });
  return seconds[0];
}

}  // namespace cpattn::torch_binding
