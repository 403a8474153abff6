// Calls into the shared object that carries cpattn; this program does not link cpattn itself.
#include <cmath>
#include <cstdio>

extern "C" double consumer_plugin_attention_sum(int seq_len);

int main() {
  // v is i % 3 over the flat index, so every output element is a convex mix of 0, 1 and 2.
  const double sum = consumer_plugin_attention_sum(33);
  const bool ok = std::isfinite(sum) && sum > 0.0 && sum < 2.0 * 33 * 2 * 8;
  std::printf("plugin: attention sum %.6f: %s\n", sum, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
