// A per-ISA copy done wrong, for build.isa_symbols_check_fires: its function is in the copy's
// namespace, but the std::vector<float> members it instantiates (explicitly here, so that inlining
// cannot hide them) are weak symbols any caller of the library could be bound to.
#include <vector>

template class std::vector<float>;

namespace cpattn::detail::avx2 {

__attribute__((noinline)) float sum_squares(int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(i) * 0.5f);
  float s = 0;
  for (float x : v) s += x * x;
  return s;
}

}  // namespace cpattn::detail::avx2
