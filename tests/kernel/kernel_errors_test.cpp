// Every precondition of the kernel API throws cpattn::Error with the right code and a message that
// names the offending argument, what was expected and what came.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/kernel.h"

namespace cpattn {
namespace {

// A valid call (B=1, Sq=5, Sk=9, Hq=4, Hkv=2, Dqk=8, Dv=6) that each case breaks in one place.
struct Call {
  Tensor q{{1, 5, 4, 8}}, k{{1, 9, 2, 8}}, v{{1, 9, 2, 6}}, out{{1, 5, 4, 6}}, dout{{1, 5, 4, 6}};
  Tensor dq{{1, 5, 4, 8}}, dk{{1, 9, 2, 8}}, dv{{1, 9, 2, 6}};
  std::vector<int64_t> q_pos{0, 1, 2, 3, 4}, k_pos{0, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> q_doc, k_doc;
  std::vector<float> lse = std::vector<float>(20), delta;
  AttentionInputs in{q.view(), k.view(), v.view(), q_pos, k_pos, {}, {}};
  View out_view = out.view(), dq_view = dq.view(), dk_view = dk.view(), dv_view = dv.view();
  ConstView dout_view = dout.view();
  AttentionParams params;
  BackwardOptions options;

  void forward() { attention_kernel_forward(in, params, {}, out_view, lse, options.kernel); }
  void backward() {
    options.delta = delta;
    attention_kernel_backward(in, params, {}, dout_view, out_view, lse, dq_view, dk_view, dv_view,
                              options);
  }
};

struct BadCase {
  const char* name;
  std::function<void(Call&)> spoil;
  bool backward;  // call backward (false: forward)
  ErrorCode code;
  std::vector<std::string> message_parts;  // the offending name, expected and got
};

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<BadCase> bad_cases() {
  using E = ErrorCode;
  return {
      {"KDimMismatch",
       [](Call& c) { c.in.k.shape[3] = 7; },
       false,
       E::kShapeMismatch,
       {"k must have shape", "[1, 9, 2, 8]", "got [1, 9, 2, 7]"}},
      {"VBatchMismatch",
       [](Call& c) { c.in.v.shape[0] = 2; },
       false,
       E::kShapeMismatch,
       {"v must have shape", "[1, 9, 2, 6]", "got [2, 9, 2, 6]"}},
      {"NegativeStride",
       [](Call& c) { c.in.q.stride[1] = -32; },
       false,
       E::kShapeMismatch,
       {"q strides", ">= 0", "got [", "-32"}},
      {"HeadsNotDivisible",
       [](Call& c) {
         c.in.k.shape[2] = 3;
         c.in.v.shape[2] = 3;
       },
       false,
       E::kShapeMismatch,
       {"Hq must be a multiple of Hkv", "Hq = 4", "Hkv = 3"}},
      {"DropoutOne",
       [](Call& c) { c.params.dropout_p = 1.0f; },
       false,
       E::kInvalidArgument,
       {"dropout_p", "[0, 1)", "got 1"}},
      {"DropoutNegative",
       [](Call& c) { c.params.dropout_p = -0.25f; },
       false,
       E::kInvalidArgument,
       {"dropout_p", "[0, 1)", "got -0.25"}},
      {"DropoutNaN",
       [](Call& c) { c.params.dropout_p = kNaN; },
       false,
       E::kInvalidArgument,
       {"dropout_p", "[0, 1)", "got nan"}},
      {"ScaleNaN",
       [](Call& c) { c.params.softmax_scale = kNaN; },
       false,
       E::kInvalidArgument,
       {"softmax_scale", "finite", "got nan"}},
      {"ScaleInfinite",
       [](Call& c) { c.params.softmax_scale = std::numeric_limits<float>::infinity(); },
       false,
       E::kInvalidArgument,
       {"softmax_scale", "finite", "got inf"}},
      {"WindowBelowMinusOne",
       [](Call& c) { c.params.window_left = -2; },
       false,
       E::kInvalidArgument,
       {"window_left", ">= -1", "got -2"}},
      {"QPosLength",
       [](Call& c) { c.in.q_pos = std::span(c.q_pos).first(4); },
       false,
       E::kShapeMismatch,
       {"q_pos", "Sq = 5", "got 4"}},
      {"KPosNegative",
       [](Call& c) { c.k_pos[2] = -3; },
       false,
       E::kInvalidArgument,
       {"k_pos[2]", ">= 0", "got -3"}},
      {"DocsOneSided",
       [](Call& c) {
         c.q_doc.assign(5, 0);
         c.in.q_doc = c.q_doc;
       },
       false,
       E::kInvalidArgument,
       {"q_doc and k_doc", "for both the queries and the keys or for neither",
        "got 5 for 5 queries and 0 for "}},
      {"KDocLength",
       [](Call& c) {
         c.q_doc.assign(5, 0);
         c.k_doc.assign(8, 0);
         c.in.q_doc = c.q_doc;
         c.in.k_doc = c.k_doc;
       },
       false,
       E::kShapeMismatch,
       {"k_doc", "Sk = 9", "got 8"}},
      {"ZeroThreads",
       [](Call& c) { c.options.kernel.num_threads = 0; },
       false,
       E::kInvalidArgument,
       {"num_threads", ">= 1", "got 0"}},
      {"LseLength",
       [](Call& c) { c.lse.resize(19); },
       false,
       E::kShapeMismatch,
       {"lse", "B * Hq * Sq", "= 20", "got 19"}},
      {"OutShape",
       [](Call& c) { c.out_view.shape[3] = 8; },
       false,
       E::kShapeMismatch,
       {"out must have shape", "[1, 5, 4, 6]", "got [1, 5, 4, 8]"}},
      {"NullData",
       [](Call& c) { c.in.q.data = nullptr; },
       false,
       E::kInvalidArgument,
       {"q", "null data", "[1, 5, 4, 8]"}},
      {"BackwardDqShape",
       [](Call& c) { c.dq_view.shape[1] = 4; },
       true,
       E::kShapeMismatch,
       {"dq must have shape", "[1, 5, 4, 8]", "got [1, 4, 4, 8]"}},
      {"BackwardDkShape",
       [](Call& c) { c.dk_view.shape[2] = 4; },
       true,
       E::kShapeMismatch,
       {"dk must have shape", "[1, 9, 2, 8]", "got [1, 9, 4, 8]"}},
      {"BackwardDvShape",
       [](Call& c) { c.dv_view.shape[3] = 8; },
       true,
       E::kShapeMismatch,
       {"dv must have shape", "[1, 9, 2, 6]", "got [1, 9, 2, 8]"}},
      {"BackwardDoutShape",
       [](Call& c) { c.dout_view.shape[0] = 3; },
       true,
       E::kShapeMismatch,
       {"dout must have shape", "[1, 5, 4, 6]", "got [3, 5, 4, 6]"}},
      {"BackwardLseLength",
       [](Call& c) { c.lse.resize(21); },
       true,
       E::kShapeMismatch,
       {"lse", "= 20", "got 21"}},
      {"BackwardDeltaLength",
       [](Call& c) { c.delta.resize(7); },
       true,
       E::kShapeMismatch,
       {"delta", "= 20", "got 7"}},
      {"BackwardDropoutNaN",
       [](Call& c) { c.params.dropout_p = kNaN; },
       true,
       E::kInvalidArgument,
       {"dropout_p", "got nan"}},
      // One dtype per call (cpattn/dtype.h): a mix names which tensor has which dtype. (The
      // buffers are fp32 and thus large enough for any dtype; only the checks run.)
      {"KBf16WithQFp32",
       [](Call& c) { c.in.k.dtype = DType::kBF16; },
       false,
       E::kInvalidArgument,
       {"one dtype", "q is fp32", "k is bf16"}},
      {"VFp16WithQBf16",
       [](Call& c) {
         c.in.q.dtype = c.in.k.dtype = DType::kBF16;
         c.in.v.dtype = DType::kF16;
       },
       false,
       E::kInvalidArgument,
       {"q is bf16", "v is fp16"}},
      {"OutFp16WithBf16Inputs",
       [](Call& c) {
         c.in.q.dtype = c.in.k.dtype = c.in.v.dtype = DType::kBF16;
         c.out_view.dtype = DType::kF16;
       },
       false,
       E::kInvalidArgument,
       {"out must be bf16", "or fp32", "got fp16"}},
      {"BackwardDoutBf16WithFp32Inputs",
       [](Call& c) { c.dout_view.dtype = DType::kBF16; },
       true,
       E::kInvalidArgument,
       {"q is fp32", "dout is bf16"}},
      {"BackwardDkFp16WithBf16Inputs",
       [](Call& c) {
         c.in.q.dtype = c.in.k.dtype = c.in.v.dtype = c.dout_view.dtype = DType::kBF16;
         c.dk_view.dtype = DType::kF16;
       },
       true,
       E::kInvalidArgument,
       {"dk must be bf16", "got fp16"}},
      {"BackwardDqBf16WithFp16Inputs",
       [](Call& c) {
         c.in.q.dtype = c.in.k.dtype = c.in.v.dtype = c.dout_view.dtype = DType::kF16;
         c.out_view.dtype = DType::kF16;
         c.dq_view.dtype = DType::kBF16;
       },
       true,
       E::kInvalidArgument,
       {"dq must be fp16", "got bf16"}},
  };
}

class KernelErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(KernelErrors, ThrowsNamingExpectedAndGot) {
  const BadCase& bad = GetParam();
  Call call;
  // The unspoiled call is valid.
  ASSERT_NO_THROW(bad.backward ? call.backward() : call.forward());
  bad.spoil(call);
  try {
    bad.backward ? call.backward() : call.forward();
    FAIL() << "no cpattn::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), bad.code) << e.what();
    const std::string what = e.what();
    for (const std::string& part : bad.message_parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Preconditions, KernelErrors, ::testing::ValuesIn(bad_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

// A SoftmaxCarry keeps the unrounded fp32 accumulator in out between calls: a bf16 out is refused
// for a carry that resumes or does not finish, and accepted for an ordinary call.
TEST(KernelDtypeErrors, CarryNeedsFp32Out) {
  Call c;
  c.in.q.dtype = c.in.k.dtype = c.in.v.dtype = DType::kBF16;
  c.out_view.dtype = DType::kBF16;
  std::vector<float> m(20), l(20);
  EXPECT_NO_THROW(
      attention_kernel_forward(c.in, c.params, {}, c.out_view, c.lse, c.options.kernel));
  try {
    attention_kernel_forward(c.in, c.params, {}, c.out_view, c.lse,
                             SoftmaxCarry{m, l, false, false}, c.options.kernel);
    FAIL() << "no cpattn::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("out must be fp32"), std::string::npos) << e.what();
  }
  c.out_view.dtype = DType::kF32;
  EXPECT_NO_THROW(attention_kernel_forward(c.in, c.params, {}, c.out_view, c.lse,
                                           SoftmaxCarry{m, l, false, false}, c.options.kernel));
}

// lse is fp32 by type (std::span<float>); a 16-bit Tensor cannot be handed over as one.
TEST(KernelDtypeErrors, LseTensorMustBeFp32) {
  Tensor lse({1, 4, 5}, DType::kBF16);
  EXPECT_THROW((void)lse.span(), Error);
}

}  // namespace
}  // namespace cpattn
