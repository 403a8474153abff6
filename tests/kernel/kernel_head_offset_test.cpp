// AttentionInputs::head_offset / total_heads: a kernel call on a slice of the query heads (and
// their kv heads) draws exactly the dropout mask of those heads in the whole call, so results of
// the slice are bitwise those heads' results of the whole call (what Ulysses relies on).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "support/errors.h"
#include "support/problem_tensors.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

// View of heads [h0, h0 + n) of a dense BSHD tensor.
ConstView heads(const Tensor& t, int64_t h0, int64_t n) {
  ConstView v = t.view();
  return {v.f32() + h0 * v.stride[2], {v.shape[0], v.shape[1], n, v.shape[3]}, v.stride};
}
View heads(Tensor& t, int64_t h0, int64_t n) {
  View v = t.view();
  return {v.f32() + h0 * v.stride[2], {v.shape[0], v.shape[1], n, v.shape[3]}, v.stride};
}

bool same_bits(ConstView a, ConstView b) {
  if (a.shape != b.shape) return false;
  for (int64_t i = 0; i < a.shape[0]; ++i)
    for (int64_t j = 0; j < a.shape[1]; ++j)
      for (int64_t h = 0; h < a.shape[2]; ++h)
        for (int64_t d = 0; d < a.shape[3]; ++d) {
          const float x = a(i, j, h, d), y = b(i, j, h, d);
          if (std::memcmp(&x, &y, sizeof(float)) != 0) return false;
        }
  return true;
}

// Hq = 8, Hkv = 2 (groups of 4): the slice of kv head 1 is q heads [4, 8).
TEST(KernelHeadOffset, SliceOfHeadsEqualsThoseHeadsOfTheWholeCallBitwise) {
  reference::CaseSpec spec;
  spec.mask = reference::MaskKind::kCausal;
  spec.dims = {2, 45, 45, 8, 2, 16, 8};
  spec.dropout_p = 0.3f;
  spec.seed = 5;
  const reference::Problem p = reference::make_problem(spec);
  const testing::ProblemTensors t(p);
  Tensor out = t.new_out();
  std::vector<float> lse = t.new_lse();
  attention_kernel_forward(t.inputs, p.params, p.rng, out.view(), lse);
  Tensor dq = t.new_like_q(), dk = t.new_like_k(), dv = t.new_like_v();
  attention_kernel_backward(t.inputs, p.params, p.rng, t.dout.view(), out.view(), lse, dq.view(),
                            dk.view(), dv.view());

  AttentionInputs slice = t.inputs;
  slice.q = heads(t.q, 4, 4);
  slice.k = heads(t.k, 1, 1);
  slice.v = heads(t.v, 1, 1);
  slice.head_offset = 4;
  slice.total_heads = 8;
  Tensor out_s({2, 45, 4, 8});
  std::vector<float> lse_s(2 * 4 * 45);
  attention_kernel_forward(slice, p.params, p.rng, out_s.view(), lse_s);
  EXPECT_TRUE(same_bits(out_s.view(), heads(out, 4, 4)));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 45; ++i)
        ASSERT_EQ(lse_s[static_cast<size_t>((b * 4 + h) * 45 + i)],
                  lse[static_cast<size_t>((b * 8 + 4 + h) * 45 + i)]);
  Tensor dq_s({2, 45, 4, 16}), dk_s({2, 45, 1, 16}), dv_s({2, 45, 1, 8});
  attention_kernel_backward(slice, p.params, p.rng, heads(t.dout, 4, 4), out_s.view(), lse_s,
                            dq_s.view(), dk_s.view(), dv_s.view());
  EXPECT_TRUE(same_bits(dq_s.view(), heads(dq, 4, 4)));
  EXPECT_TRUE(same_bits(dk_s.view(), heads(dk, 1, 1)));
  EXPECT_TRUE(same_bits(dv_s.view(), heads(dv, 1, 1)));

  // Without the offset the slice draws heads [0, 4)'s masks: a different result.
  AttentionInputs wrong = slice;
  wrong.head_offset = 0;
  wrong.total_heads = 0;
  Tensor out_w({2, 45, 4, 8});
  attention_kernel_forward(wrong, p.params, p.rng, out_w.view(), lse_s);
  EXPECT_FALSE(same_bits(out_w.view(), heads(out, 4, 4)));
}

TEST(KernelHeadOffset, BadCoordinatesAreRejected) {
  reference::CaseSpec spec;
  spec.dims = {1, 5, 5, 2, 1, 8, 8};
  const reference::Problem p = reference::make_problem(spec);
  const testing::ProblemTensors t(p);
  Tensor out = t.new_out();
  std::vector<float> lse = t.new_lse();
  AttentionInputs in = t.inputs;
  in.head_offset = 3;
  in.total_heads = 4;  // 3 + Hq 2 > 4
  const Error e =
      testing::error_of([&] { attention_kernel_forward(in, p.params, p.rng, out.view(), lse); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("head_offset + Hq must be <= total_heads"),
            std::string::npos)
      << e.what();
  in.head_offset = -1;
  in.total_heads = 0;
  EXPECT_EQ(testing::error_of([&] {
              attention_kernel_forward(in, p.params, p.rng, out.view(), lse);
            }).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpattn
