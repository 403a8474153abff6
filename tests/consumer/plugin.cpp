// A shared object with cpattn linked in (position-independent code is required for this): one C
// entry point runs a kernel forward and returns the sum of its output.
#include <cpattn/kernel.h>

#include <numeric>
#include <vector>

extern "C" double consumer_plugin_attention_sum(int seq_len) {
  const int64_t s = seq_len, h = 2, d = 8;
  cpattn::Tensor q({1, s, h, d}), k({1, s, h, d}), v({1, s, h, d});
  for (int64_t i = 0; i < q.numel(); ++i) {
    q.data()[i] = static_cast<float>(i % 7) * 0.1f;
    k.data()[i] = static_cast<float>(i % 5) * 0.1f;
    v.data()[i] = static_cast<float>(i % 3);
  }
  std::vector<int64_t> pos(static_cast<size_t>(s));
  std::iota(pos.begin(), pos.end(), int64_t{0});
  cpattn::AttentionParams params;
  params.causal = true;
  const cpattn::KernelForwardResult r = cpattn::attention_kernel_forward(
      {q.view(), k.view(), v.view(), pos, pos, {}, {}}, params, {});
  return std::accumulate(r.out.span().begin(), r.out.span().end(), 0.0);
}
