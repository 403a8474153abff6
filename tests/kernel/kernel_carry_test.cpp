// The kernel's modes for split work (kernel.h): a forward continued over several key sets
// (SoftmaxCarry), the backward's overwrite_dkdv and before_dkdv, and attention_kernel_delta.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "support/metrics.h"
#include "support/problem_tensors.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

using reference::CaseSpec;
using reference::MaskKind;
using reference::PositionKind;
using testing::bitwise_equal;

using reference::spec_of;

// One key set of a split: rows `rows` of the problem's k/v (dense BSHD copies), positions, docs.
struct KeyPiece {
  Tensor k, v;
  std::vector<int64_t> pos, doc;
};

// Splits the keys into `n` pieces: interleaved (key j to piece j % n) or contiguous chunks.
std::vector<KeyPiece> split_keys(const reference::Problem& p, const testing::ProblemTensors& t,
                                 int n, bool interleaved) {
  const reference::Dims& d = p.dims;
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(n));
  for (int64_t j = 0; j < d.Sk; ++j) {
    const int64_t piece = interleaved ? j % n : j * n / d.Sk;
    rows[static_cast<size_t>(piece)].push_back(j);
  }
  std::vector<KeyPiece> pieces;
  for (const std::vector<int64_t>& r : rows) {
    const int64_t len = static_cast<int64_t>(r.size());
    KeyPiece kp{Tensor({d.B, len, d.Hkv, d.Dqk}), Tensor({d.B, len, d.Hkv, d.Dv}), {}, {}};
    const View k = kp.k.view(), v = kp.v.view();
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t i = 0; i < len; ++i)
        for (int64_t h = 0; h < d.Hkv; ++h) {
          const int64_t j = r[static_cast<size_t>(i)];
          for (int64_t e = 0; e < d.Dqk; ++e) k(b, i, h, e) = t.k.view()(b, j, h, e);
          for (int64_t e = 0; e < d.Dv; ++e) v(b, i, h, e) = t.v.view()(b, j, h, e);
        }
    for (int64_t j : r) {
      kp.pos.push_back(p.k_pos[static_cast<size_t>(j)]);
      if (!p.k_doc.empty()) kp.doc.push_back(p.k_doc[static_cast<size_t>(j)]);
    }
    pieces.push_back(std::move(kp));
  }
  return pieces;
}

AttentionInputs piece_inputs(const testing::ProblemTensors& t, const reference::Problem& p,
                             const KeyPiece& piece) {
  return {t.q.view(), piece.k.view(), piece.v.view(), p.q_pos, piece.pos, p.q_doc, piece.doc};
}

// Runs the forward over the pieces in order with one carry; the last call finishes unless
// `finish_last` is false. Returns out and lse.
struct SplitResult {
  Tensor out;
  std::vector<float> lse, row_max, row_sum;
};
SplitResult run_split(const reference::Problem& p, const testing::ProblemTensors& t,
                      const std::vector<KeyPiece>& pieces, Isa isa, bool finish_last = true) {
  SplitResult r{t.new_out(), t.new_lse(), t.new_lse(), t.new_lse()};
  KernelOptions options(2);
  options.isa = isa;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SoftmaxCarry carry{r.row_max, r.row_sum, i > 0, finish_last && i + 1 == pieces.size()};
    attention_kernel_forward(piece_inputs(t, p, pieces[i]), p.params, p.rng, r.out.view(), r.lse,
                             carry, options);
  }
  return r;
}

const std::vector<CaseSpec> kSplitCases = {
    spec_of(MaskKind::kCausal, {2, 193, 411, 4, 2, 64, 40}, PositionKind::kZigzag, 0.1f, 1),
    spec_of(MaskKind::kDocsCausal, {1, 257, 257, 2, 1, 40, 40}, PositionKind::kStriped, 0.0f, 2),
    spec_of(MaskKind::kWindow, {1, 97, 300, 8, 2, 8, 8}, PositionKind::kContiguous, 0.5f, 3),
};

class SoftmaxCarrySplit : public ::testing::TestWithParam<CaseSpec> {};

// A forward split over 1, 3, 8 and 40 key sets (interleaved and contiguous) meets the tolerance
// rule on every ISA, and its error does not grow with the number of sets: each call continues the
// one online softmax. A split into one set is the ordinary call, bitwise.
TEST_P(SoftmaxCarrySplit, MatchesReferenceForAnySplit) {
  const reference::Problem p = reference::make_problem(GetParam());
  const testing::ProblemTensors t(p);
  const reference::Oracle oracle = reference::make_oracle(p, false);
  for (Isa isa : available_isas()) {
    Tensor plain = t.new_out();
    std::vector<float> plain_lse = t.new_lse();
    KernelOptions options(2);
    options.isa = isa;
    attention_kernel_forward(t.inputs, p.params, p.rng, plain.view(), plain_lse, options);
    for (int n : {1, 3, 8, 40}) {
      for (bool interleaved : {true, false}) {
        const SplitResult r = run_split(p, t, split_keys(p, t, n, interleaved), isa);
        const std::string what = std::string(isa_name(isa)) + ", " + std::to_string(n) +
                                 (interleaved ? " interleaved" : " contiguous") + " sets";
        const reference::Outputs got{
            reference::to_doubles(r.out.span()), reference::to_doubles(r.lse), {}, {}, {}};
        EXPECT_TRUE(testing::row_passes(reference::compare(what, oracle, got)));
        if (n == 1) {
          EXPECT_TRUE(bitwise_equal(r.out.span(), plain.span())) << what;
          EXPECT_TRUE(bitwise_equal(r.lse, plain_lse)) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SoftmaxCarrySplit, ::testing::ValuesIn(kSplitCases),
                         [](const auto& tp) { return reference::case_name(tp.param); });

// finish = false keeps the state and leaves lse alone; a finishing call over no keys then
// normalises it exactly as finishing the last call would have.
TEST(SoftmaxCarry, UnfinishedStateFinishesLater) {
  const reference::Problem p = reference::make_problem(
      spec_of(MaskKind::kCausal, {1, 97, 201, 4, 2, 40, 24}, PositionKind::kZigzag, 0.1f, 4));
  const testing::ProblemTensors t(p);
  const std::vector<KeyPiece> pieces = split_keys(p, t, 3, false);
  const SplitResult finished = run_split(p, t, pieces, Isa::kAuto);
  SplitResult open = run_split(p, t, pieces, Isa::kAuto, false);
  for (float x : open.lse) EXPECT_EQ(x, 0.0f) << "lse written by an unfinished call";
  const KeyPiece none{Tensor({1, 0, 2, 40}), Tensor({1, 0, 2, 24}), {}, {}};
  const AttentionInputs no_keys{t.q.view(), none.k.view(), none.v.view(), p.q_pos, {}, {}, {}};
  attention_kernel_forward(no_keys, p.params, p.rng, open.out.view(), open.lse,
                           SoftmaxCarry{open.row_max, open.row_sum, true, true});
  EXPECT_TRUE(bitwise_equal(open.out.span(), finished.out.span()));
  EXPECT_TRUE(bitwise_equal(open.lse, finished.lse));
}

TEST(SoftmaxCarry, SpansMustCoverEveryRow) {
  const reference::Problem p = reference::make_problem(
      spec_of(MaskKind::kNone, {1, 7, 7, 2, 1, 8, 8}, PositionKind::kContiguous, 0.0f, 5));
  const testing::ProblemTensors t(p);
  Tensor out = t.new_out();
  std::vector<float> lse = t.new_lse(), good = t.new_lse(), short_one(3);
  const auto run = [&](const SoftmaxCarry& carry) {
    attention_kernel_forward(t.inputs, p.params, p.rng, out.view(), lse, carry);
  };
  run(SoftmaxCarry{good, good, false, true});
  for (const SoftmaxCarry& bad :
       {SoftmaxCarry{short_one, good, true, true}, SoftmaxCarry{good, short_one, false, false},
        SoftmaxCarry{{}, {}, true, true}, SoftmaxCarry{{}, {}, false, false}}) {
    try {
      run(bad);
      ADD_FAILURE() << "a carry without full-length spans was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
      EXPECT_NE(std::string(e.what()).find("SoftmaxCarry.row_"), std::string::npos) << e.what();
    }
  }
}

struct Grads {
  Tensor dq, dk, dv;
};

class BackwardSplitModes : public ::testing::Test {
 protected:
  void SetUp() override {
    problem_ = reference::make_problem(
        spec_of(MaskKind::kCausal, {2, 97, 113, 4, 2, 40, 24}, PositionKind::kStriped, 0.1f, 7));
    t_ = std::make_unique<testing::ProblemTensors>(problem_);
    out_ = t_->new_out();
    lse_ = t_->new_lse();
    attention_kernel_forward(t_->inputs, problem_.params, problem_.rng, out_.view(), lse_);
    plain_ = run({}, 0.0f);
  }
  Grads run(const BackwardOptions& options, float prefill) const {
    Grads g{t_->new_like_q(), t_->new_like_k(), t_->new_like_v()};
    for (Tensor* x : {&g.dq, &g.dk, &g.dv}) {
      for (float& e : x->span()) e = prefill;
    }
    attention_kernel_backward(t_->inputs, problem_.params, problem_.rng, t_->dout.view(),
                              out_.view(), lse_, g.dq.view(), g.dk.view(), g.dv.view(), options);
    return g;
  }
  reference::Problem problem_;
  std::unique_ptr<testing::ProblemTensors> t_;
  Tensor out_;
  std::vector<float> lse_;
  Grads plain_;
};

// accumulate + overwrite_dkdv: dq adds to what it held, dk and dv are overwritten.
TEST_F(BackwardSplitModes, OverwriteDkdvAccumulatesOnlyDq) {
  BackwardOptions options;
  options.accumulate = true;
  options.overwrite_dkdv = true;
  const Grads g = run(options, 0.375f);
  EXPECT_TRUE(bitwise_equal(g.dk.span(), plain_.dk.span()));
  EXPECT_TRUE(bitwise_equal(g.dv.span(), plain_.dv.span()));
  std::vector<double> want = reference::to_doubles(plain_.dq.span());
  for (double& e : want) e += 0.375;
  EXPECT_LT(testing::relative_error(reference::to_doubles(g.dq.span()), want), 1e-6);
}

// before_dkdv runs once per call, on any thread count, before any dk/dv element is touched; what
// it stores there is what the gradients are added to.
TEST_F(BackwardSplitModes, BeforeDkdvRunsOnceBeforeTheFirstWrite) {
  for (int threads : {1, 3}) {
    Grads g{t_->new_like_q(), t_->new_like_k(), t_->new_like_v()};
    std::atomic<int> calls{0};
    bool untouched = true;
    BackwardOptions options;
    options.kernel.num_threads = threads;
    options.accumulate = true;
    options.before_dkdv = [&] {
      ++calls;
      for (float x : g.dk.span()) untouched = untouched && x == 0.0f;
      for (float x : g.dv.span()) untouched = untouched && x == 0.0f;
      // The "arrived accumulator": gradients are added to it.
      for (float& x : g.dk.span()) x = 0.5f;
      for (float& x : g.dv.span()) x = 0.5f;
    };
    attention_kernel_backward(t_->inputs, problem_.params, problem_.rng, t_->dout.view(),
                              out_.view(), lse_, g.dq.view(), g.dk.view(), g.dv.view(), options);
    EXPECT_EQ(calls.load(), 1) << threads << " threads";
    EXPECT_TRUE(untouched) << threads << " threads: dk/dv written before the hook";
    BackwardOptions prefilled;
    prefilled.kernel.num_threads = threads;
    prefilled.accumulate = true;
    const Grads want = run(prefilled, 0.5f);
    EXPECT_TRUE(bitwise_equal(g.dk.span(), want.dk.span())) << threads << " threads";
    EXPECT_TRUE(bitwise_equal(g.dv.span(), want.dv.span())) << threads << " threads";
  }
}

TEST_F(BackwardSplitModes, BeforeDkdvErrorsStopTheCall) {
  for (int threads : {1, 3}) {
    BackwardOptions options;
    options.kernel.num_threads = threads;
    options.before_dkdv = [] { throw std::runtime_error("accumulator lost"); };
    try {
      run(options, 0.0f);
      ADD_FAILURE() << "the hook's exception was swallowed";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "accumulator lost");
    }
  }
}

// attention_kernel_delta is the backward's own D_i: passing it changes no bit, on every ISA.
TEST_F(BackwardSplitModes, DeltaIsTheBackwardsOwn) {
  for (Isa isa : available_isas()) {
    std::vector<float> delta = t_->new_lse();
    KernelOptions dopt(2);
    dopt.isa = isa;
    attention_kernel_delta(t_->dout.view(), out_.view(), delta, dopt);
    BackwardOptions with, without;
    with.kernel.isa = without.kernel.isa = isa;
    with.delta = delta;
    const Grads a = run(with, 0.0f), b = run(without, 0.0f);
    EXPECT_TRUE(bitwise_equal(a.dq.span(), b.dq.span())) << isa_name(isa);
    EXPECT_TRUE(bitwise_equal(a.dk.span(), b.dk.span())) << isa_name(isa);
  }
  std::vector<float> wrong(5);
  EXPECT_THROW(attention_kernel_delta(t_->dout.view(), out_.view(), wrong), Error);
  std::vector<float> right = t_->new_lse();
  EXPECT_THROW(attention_kernel_delta(t_->dout.view(), t_->q.view(), right), Error);
}

}  // namespace
}  // namespace cpattn
