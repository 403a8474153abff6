// Kernel execution options that must not change the math: thread counts, accumulate mode, a
// precomputed delta, and operands that are non-dense strided views (packed QKV, padded rows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cpattn/kernel.h"
#include "support/metrics.h"
#include "support/problem_tensors.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using reference::CaseSpec;
using reference::MaskKind;
using reference::PositionKind;

using reference::spec_of;

class KernelThreads : public ::testing::TestWithParam<CaseSpec> {};

using testing::bitwise_equal;

// Forward results may not depend on the thread count at all; backward may only differ in
// rounding (a different dq reduction split) and must stay within the tolerance rule.
TEST_P(KernelThreads, ForwardBitwiseBackwardWithinTolerance) {
  const reference::Problem problem = reference::make_problem(GetParam());
  testing::ProblemTensors t(problem);
  Tensor out1 = t.new_out(), out2 = t.new_out();
  std::vector<float> lse1 = t.new_lse(), lse2 = t.new_lse();
  attention_kernel_forward(t.inputs, problem.params, problem.rng, out1.view(), lse1, {1});
  for (int threads : {2, 3}) {
    attention_kernel_forward(t.inputs, problem.params, problem.rng, out2.view(), lse2, {threads});
    EXPECT_TRUE(bitwise_equal(out1.span(), out2.span())) << threads << " threads: out differs";
    EXPECT_TRUE(bitwise_equal(lse1, lse2)) << threads << " threads: lse differs";
  }
  const reference::Outputs got = reference::run_kernel(problem, {MemoryLayout::kBSHD, 2, true});
  EXPECT_TRUE(
      testing::row_passes(reference::compare("2 threads", reference::make_oracle(problem), got)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KernelThreads,
    ::testing::Values(
        spec_of(MaskKind::kCausal, {2, 97, 1025, 4, 2, 64, 64}, PositionKind::kZigzag, 0.1f, 1),
        spec_of(MaskKind::kDocsCausal, {1, 1025, 97, 8, 2, 40, 40}, PositionKind::kStriped, 0.0f,
                2),
        spec_of(MaskKind::kNone, {3, 7, 97, 4, 1, 8, 8}, PositionKind::kContiguous, 0.5f, 3),
        spec_of(MaskKind::kWindow, {1, 1, 7, 1, 1, 8, 8}, PositionKind::kContiguous, 0.0f, 4)),
    [](const auto& p) { return reference::case_name(p.param); });

struct Gradients {
  Tensor dq, dk, dv;
};

Gradients run_backward(const testing::ProblemTensors& t, const reference::Problem& problem,
                       const Tensor& out, std::span<const float> lse,
                       const BackwardOptions& options, float prefill = 0.0f) {
  Gradients g{t.new_like_q(), t.new_like_k(), t.new_like_v()};
  for (Tensor* x : {&g.dq, &g.dk, &g.dv}) {
    for (float& e : x->span()) e = prefill;
  }
  attention_kernel_backward(t.inputs, problem.params, problem.rng, t.dout.view(), out.view(), lse,
                            g.dq.view(), g.dk.view(), g.dv.view(), options);
  return g;
}

class KernelBackwardOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    problem_ = reference::make_problem(
        spec_of(MaskKind::kCausal, {2, 97, 113, 4, 2, 40, 24}, PositionKind::kStriped, 0.1f, 7));
    tensors_ = std::make_unique<testing::ProblemTensors>(problem_);
    out_ = tensors_->new_out();
    lse_ = tensors_->new_lse();
    attention_kernel_forward(tensors_->inputs, problem_.params, problem_.rng, out_.view(), lse_);
    plain_ = run_backward(*tensors_, problem_, out_, lse_, {});
  }
  reference::Problem problem_;
  std::unique_ptr<testing::ProblemTensors> tensors_;
  Tensor out_;
  std::vector<float> lse_;
  Gradients plain_;
};

// accumulate = true adds to what the buffers hold: result = prefill + plain gradients. With 2
// threads the call's B * Hkv = 4 items need no chunks; with 3 (not a divisor of 4) each kv
// head's k tiles are split into chunks: chunk 0 adds its dq rows to dq itself and the others'
// partial rows are added after.
TEST_F(KernelBackwardOptions, AccumulateAddsToExistingGradients) {
  constexpr float kPrefill = 0.375f;
  for (int threads : {1, 2, 3}) {
    BackwardOptions options;
    options.kernel.num_threads = threads;
    options.accumulate = true;
    const Gradients acc = run_backward(*tensors_, problem_, out_, lse_, options, kPrefill);
    const std::array<std::pair<const Tensor*, const Tensor*>, 3> pairs = {
        {{&acc.dq, &plain_.dq}, {&acc.dk, &plain_.dk}, {&acc.dv, &plain_.dv}}};
    for (const auto& [a, p] : pairs) {
      std::vector<double> expected = reference::to_doubles(p->span());
      for (double& e : expected) e += kPrefill;
      EXPECT_LT(testing::relative_error(reference::to_doubles(a->span()), expected), 1e-6)
          << threads << " threads";
    }
  }
  // Without accumulate the prefill (NaN too) is overwritten, chunked (3 threads) or not.
  const Gradients over = run_backward(*tensors_, problem_, out_, lse_, {}, kPrefill);
  EXPECT_TRUE(bitwise_equal(over.dq.span(), plain_.dq.span()));
  EXPECT_TRUE(bitwise_equal(over.dk.span(), plain_.dk.span()));
  EXPECT_TRUE(bitwise_equal(over.dv.span(), plain_.dv.span()));
  BackwardOptions three;
  three.kernel.num_threads = 3;
  const Gradients zero3 = run_backward(*tensors_, problem_, out_, lse_, three);
  const Gradients nan3 = run_backward(*tensors_, problem_, out_, lse_, three, std::nanf(""));
  EXPECT_TRUE(bitwise_equal(nan3.dq.span(), zero3.dq.span()));
  EXPECT_TRUE(bitwise_equal(nan3.dk.span(), zero3.dk.span()));
  EXPECT_TRUE(bitwise_equal(nan3.dv.span(), zero3.dv.span()));
}

std::vector<float> delta_of(const reference::Problem& p, const Tensor& dout, const Tensor& out) {
  const reference::Dims& d = p.dims;
  std::vector<float> delta(static_cast<size_t>(d.B * d.Hq * d.Sq));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hq; ++h)
      for (int64_t i = 0; i < d.Sq; ++i) {
        double s = 0.0;
        for (int64_t e = 0; e < d.Dv; ++e) {
          const size_t at = static_cast<size_t>(((b * d.Sq + i) * d.Hq + h) * d.Dv + e);
          s += static_cast<double>(dout.data()[at]) * static_cast<double>(out.data()[at]);
        }
        delta[static_cast<size_t>((b * d.Hq + h) * d.Sq + i)] = static_cast<float>(s);
      }
  return delta;
}

// A precomputed delta = <dout, out> gives the same gradients; a wrong one changes dq and dk
// (dS depends on it) but not dv, which proves the kernel uses the given values.
TEST_F(KernelBackwardOptions, PrecomputedDeltaIsUsed) {
  std::vector<float> delta = delta_of(problem_, tensors_->dout, out_);
  BackwardOptions options;
  options.delta = delta;
  const Gradients with = run_backward(*tensors_, problem_, out_, lse_, options);
  EXPECT_LT(testing::relative_error(reference::to_doubles(with.dq.span()),
                                    reference::to_doubles(plain_.dq.span())),
            1e-5);
  EXPECT_LT(testing::relative_error(reference::to_doubles(with.dk.span()),
                                    reference::to_doubles(plain_.dk.span())),
            1e-5);
  EXPECT_TRUE(bitwise_equal(with.dv.span(), plain_.dv.span()));

  for (float& e : delta) e += 1.0f;
  const Gradients shifted = run_backward(*tensors_, problem_, out_, lse_, options);
  EXPECT_GT(testing::relative_error(reference::to_doubles(shifted.dq.span()),
                                    reference::to_doubles(plain_.dq.span())),
            1e-2);
  EXPECT_TRUE(bitwise_equal(shifted.dv.span(), plain_.dv.span()));
}

// q, k, v as slices of one packed [B, S, Hq + 2 Hkv, D] buffer and outputs/gradients written into
// rows padded by 3 floats: the kernel must honour arbitrary strides and leave padding untouched.
TEST(KernelStrides, PackedQkvAndPaddedOutputs) {
  const reference::Problem p = reference::make_problem(
      spec_of(MaskKind::kCausalWindow, {2, 67, 67, 4, 2, 40, 40}, PositionKind::kZigzag, 0.1f, 9));
  const reference::Dims& d = p.dims;
  const int64_t heads = d.Hq + 2 * d.Hkv, dim = d.Dqk;
  Tensor packed({d.B, d.Sq, heads, dim});
  const std::array<int64_t, 4> packed_stride = {d.Sq * heads * dim, heads * dim, dim, 1};
  const View q{packed.data(), {d.B, d.Sq, d.Hq, dim}, packed_stride};
  const View k{packed.data() + d.Hq * dim, {d.B, d.Sk, d.Hkv, dim}, packed_stride};
  const View v{packed.data() + (d.Hq + d.Hkv) * dim, {d.B, d.Sk, d.Hkv, dim}, packed_stride};
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t s = 0; s < d.Sq; ++s)
      for (int64_t e = 0; e < dim; ++e) {
        for (int64_t h = 0; h < d.Hq; ++h)
          q(b, s, h, e) = static_cast<float>(p.q[((b * d.Sq + s) * d.Hq + h) * dim + e]);
        for (int64_t h = 0; h < d.Hkv; ++h) {
          k(b, s, h, e) = static_cast<float>(p.k[((b * d.Sk + s) * d.Hkv + h) * dim + e]);
          v(b, s, h, e) = static_cast<float>(p.v[((b * d.Sk + s) * d.Hkv + h) * dim + e]);
        }
      }
  constexpr int64_t kPad = 3;
  constexpr float kSentinel = 777.0f;
  const auto padded = [&](int64_t s, int64_t h) {
    Tensor t({d.B, s, h, dim + kPad});
    for (float& e : t.span()) e = kSentinel;
    return t;
  };
  const auto padded_view = [&](Tensor& t) {
    const auto& sh = t.shape();
    return View{
        t.data(), {sh[0], sh[1], sh[2], dim}, {sh[1] * sh[2] * sh[3], sh[2] * sh[3], sh[3], 1}};
  };
  Tensor out = padded(d.Sq, d.Hq), dq = padded(d.Sq, d.Hq), dk = padded(d.Sk, d.Hkv),
         dv = padded(d.Sk, d.Hkv);
  testing::ProblemTensors t(p);
  const AttentionInputs in{q, k, v, p.q_pos, p.k_pos, {}, {}};
  std::vector<float> lse = t.new_lse();
  attention_kernel_forward(in, p.params, p.rng, padded_view(out), lse);
  attention_kernel_backward(in, p.params, p.rng, t.dout.view(), padded_view(out), lse,
                            padded_view(dq), padded_view(dk), padded_view(dv));

  const auto unpad = [&](const Tensor& x) {
    std::vector<double> r;
    const auto& sh = x.shape();
    for (int64_t row = 0; row < sh[0] * sh[1] * sh[2]; ++row)
      for (int64_t e = 0; e < sh[3]; ++e) {
        const float value = x.data()[row * sh[3] + e];
        if (e < dim) {
          r.push_back(value);
        } else {
          EXPECT_EQ(value, kSentinel) << "padding overwritten at row " << row;
        }
      }
    return r;
  };
  reference::Outputs got{unpad(out), reference::to_doubles(lse), unpad(dq), unpad(dk), unpad(dv)};
  EXPECT_TRUE(testing::row_passes(reference::compare("packed", reference::make_oracle(p), got)));
}

}  // namespace
}  // namespace cpattn
