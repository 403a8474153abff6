// The entry points of this ISA copy (kernel/tile_plan.h: IsaKernels), looked up by
// kernel/dispatch.cpp.
#include "kernel/isa/table.h"

#include "kernel/isa/backward.h"
#include "kernel/isa/dot_rate.h"
#include "kernel/isa/forward.h"
#include "kernel/isa/gemm.h"
#include "kernel/isa/pack.h"
#include "kernel/isa/simd.h"

namespace cpattn::detail::CPATTN_ISA_NS {
namespace {

void row_dots_entry(const ConstView& dout, const ConstView& out, int64_t b, int64_t h,
                    int64_t begin, int64_t rows, float* d) {
  row_dots(dout, out, {b, h, begin, rows}, d);
}

// An exp of simd.h as an entry point: eight vectors at a time through its array form, as the
// forward's softmax runs it, the last n / kLanes mod 8 one at a time: the exp test checks both
// forms.
template <ExpInputs kInputs>
struct Exp {
  template <int G>
  void operator()(VF (&v)[G]) const {
    exp_v<kInputs>(v);
  }
};
struct Exp2 {
  template <int G>
  void operator()(VF (&v)[G]) const {
    exp2_v(v);
  }
};
template <class ExpOf>
void exp_entry(const float* x, float* y, int64_t n) {
  constexpr int kBlock = 8;
  int64_t i = 0;
  for (; i + kBlock * kLanes <= n; i += kBlock * kLanes) {
    VF v[kBlock];
    for (int b = 0; b < kBlock; ++b) v[b] = load(x + i + b * kLanes);
    ExpOf{}(v);
    for (int b = 0; b < kBlock; ++b) store(y + i + b * kLanes, v[b]);
  }
  for (; i < n; i += kLanes) {
    VF one[1] = {load(x + i)};
    ExpOf{}(one);
    store(y + i, one[0]);
  }
}

void tanh_entry(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) store(y + i, tanh_v(load(x + i)));
}

// Constant-initialised: kernels() runs no instruction of this copy's ISA (building the struct in
// code let -O3 store it with 512-bit moves in the AVX-512 copy), so baseline code may look up a
// copy the CPU cannot run, as the table test does.
constinit const IsaKernels kTable = {Isa::CPATTN_ISA_ENUM,
                                     kNr,
                                     &forward_item,
                                     &backward_item,
                                     &row_dots_entry,
                                     &exp_entry<Exp<ExpInputs::kAny>>,
                                     &exp_entry<Exp<ExpInputs::kNonPositive>>,
                                     &exp_entry<Exp2>,
                                     &tanh_entry,
                                     &widen_fp16_row,
                                     &bf16_dot_vs_fma_rate};

}  // namespace

const IsaKernels& kernels() { return kTable; }

}  // namespace cpattn::detail::CPATTN_ISA_NS
