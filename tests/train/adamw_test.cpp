// AdamW against a hand-computed update, decay only on matrices, the lr schedule's landmarks,
// gradient clipping and bitwise determinism.
#include "train/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

ModelConfig tiny() { return testing::tiny_model(1, 4, 2, 1, 6, 5, 3); }

TEST(LearningRate, WarmupThenCosineToTenPercent) {
  AdamWConfig c;
  c.lr = 1e-3;
  c.warmup_steps = 10;
  c.total_steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1e-3);
  EXPECT_NEAR(learning_rate(c, 60), 1e-3 * (0.1 + 0.9 * 0.5), 1e-15);  // halfway
  EXPECT_NEAR(learning_rate(c, 110), 1e-4, 1e-15);
  EXPECT_NEAR(learning_rate(c, 5000), 1e-4, 1e-15);
  for (int64_t s = 10; s < 110; ++s) EXPECT_GE(learning_rate(c, s), learning_rate(c, s + 1));
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-3);
  EXPECT_THROW(learning_rate(c, -1), Error);
}

TEST(AdamW, TwoStepsMatchAHandComputedUpdate) {
  const ModelConfig mc = tiny();
  AdamWConfig oc;
  oc.lr = 0.01;
  oc.warmup_steps = 0;
  oc.total_steps = 1000;
  ModelParams p(mc);
  ModelGrads g(mc);
  const ParamInfo& wqkv = p.infos()[2];
  const ParamInfo& gain = p.infos()[1];
  ASSERT_TRUE(wqkv.decay);
  ASSERT_FALSE(gain.decay);
  const std::vector<float> p0(p.flat().begin(), p.flat().end());
  AdamW opt(mc, oc);
  // Reference in double for one matrix element (decayed) and one gain element (not decayed).
  struct Ref {
    double p, m = 0, v = 0;
  };
  Ref rw{p0[static_cast<size_t>(wqkv.offset + 3)]}, rg{p0[static_cast<size_t>(gain.offset + 1)]};
  const double grads[2][2] = {{0.5, -0.2}, {-0.1, 0.3}};
  for (int t = 1; t <= 2; ++t) {
    g.zero();
    g.get(wqkv)[3] = static_cast<float>(grads[t - 1][0]);
    g.get(gain)[1] = static_cast<float>(grads[t - 1][1]);
    const double lr = opt.step(p, g);
    EXPECT_DOUBLE_EQ(lr, learning_rate(oc, t - 1));
    auto update = [&](Ref& r, double grad, bool decay) {
      if (decay) r.p *= 1.0 - lr * oc.weight_decay;
      r.m = oc.beta1 * r.m + (1 - oc.beta1) * grad;
      r.v = oc.beta2 * r.v + (1 - oc.beta2) * grad * grad;
      const double mhat = r.m / (1 - std::pow(oc.beta1, t));
      const double vhat = r.v / (1 - std::pow(oc.beta2, t));
      r.p -= lr * mhat / (std::sqrt(vhat) + oc.eps);
    };
    update(rw, grads[t - 1][0], true);
    update(rg, grads[t - 1][1], false);
    EXPECT_NEAR(p.get(wqkv)[3], rw.p, 1e-6) << "step " << t;
    EXPECT_NEAR(p.get(gain)[1], rg.p, 1e-6) << "step " << t;
  }
  EXPECT_EQ(opt.steps_taken(), 2);
  // Zero-gradient elements: matrices shrink by the decay only, gains do not move.
  const double shrink = (1 - learning_rate(oc, 0) * 0.1) * (1 - learning_rate(oc, 1) * 0.1);
  EXPECT_NEAR(p.get(wqkv)[0], p0[static_cast<size_t>(wqkv.offset)] * shrink, 1e-9);
  EXPECT_EQ(p.get(gain)[0], p0[static_cast<size_t>(gain.offset)]);
}

TEST(AdamW, IsBitwiseDeterministic) {
  const ModelConfig mc = tiny();
  AdamWConfig oc;
  oc.warmup_steps = 2;
  oc.total_steps = 5;
  ModelParams a(mc), b(mc);
  ModelGrads g(mc);
  for (size_t i = 0; i < g.flat().size(); ++i) g.flat()[i] = std::sin(static_cast<float>(i));
  AdamW oa(mc, oc), ob(mc, oc);
  for (int s = 0; s < 4; ++s) {
    oa.step(a, g);
    ob.step(b, g);
  }
  EXPECT_EQ(a.digest(), b.digest());
}

TEST(AdamW, ClipGradNormScalesToTheMaximum) {
  ModelGrads g(tiny());
  g.flat()[0] = 3.0f;
  g.flat()[7] = 4.0f;
  EXPECT_DOUBLE_EQ(grad_norm(g), 5.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_NEAR(grad_norm(g), 1.0, 1e-7);
  EXPECT_FLOAT_EQ(g.flat()[0], 0.6f);
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 2.0), grad_norm(g));  // below the maximum: unchanged
  EXPECT_THROW(clip_grad_norm(g, 0.0), Error);
}

// NaN > max_norm is false: without the check a NaN gradient would reach the optimizer unclipped.
TEST(AdamW, ClipGradNormRefusesANonFiniteNormNamingTheTensor) {
  ModelGrads g(tiny());
  const ParamInfo& second = g.infos()[1];
  g.get(second)[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(g.first_nonfinite(), &second);
  try {
    clip_grad_norm(g, 1.0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNumeric);
    EXPECT_EQ(std::string(e.what()),
              "clip_grad_norm: the gradient norm is nan; first non-finite value in " + second.name);
  }
  g.get(second)[2] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(clip_grad_norm(g, 1.0), Error);
  g.get(second)[2] = 0.0f;
  EXPECT_EQ(g.first_nonfinite(), nullptr);
}

// An update whose step overflows float (a finite lr of 1e39 is inf as a float step size) is
// named before it is applied, so a run can keep its last finite weights; an ordinary update is
// not, and nonfinite_update changes nothing (the step after it is bitwise a plain step's).
TEST(AdamW, AnUpdateThatWouldLeaveNonFiniteWeightsIsNamedBeforeItIsApplied) {
  const ModelConfig mc = tiny();
  ModelParams p(mc), reference(mc);
  ModelGrads g(mc);
  for (size_t i = 0; i < g.flat().size(); ++i) g.flat()[i] = std::cos(static_cast<float>(i));
  AdamWConfig oc;
  oc.warmup_steps = 0;
  oc.total_steps = 3;
  AdamW checked(mc, oc), plain(mc, oc);
  EXPECT_EQ(checked.nonfinite_update(p, g), "");
  checked.step(p, g);
  plain.step(reference, g);
  EXPECT_EQ(p.digest(), reference.digest());
  oc.lr = 1e39;
  AdamW huge(mc, oc);
  const uint64_t before = p.digest();
  EXPECT_EQ(huge.nonfinite_update(p, g),
            "the AdamW update at lr 1e+39 would make " + p.infos()[0].name + " non-finite");
  EXPECT_EQ(p.digest(), before);
  EXPECT_EQ(huge.steps_taken(), 0);
  // A finite lr whose update overflows a weight: a weight near the float maximum.
  p.flat()[0] = std::numeric_limits<float>::max();
  g.flat()[0] = -1.0f;
  oc.lr = 1e38;
  AdamW large(mc, oc);
  EXPECT_NE(large.nonfinite_update(p, g), "");
}

// A restored optimizer continues bitwise like the one whose state it copied.
TEST(AdamW, RestoredStateContinuesBitwise) {
  const ModelConfig mc = tiny();
  AdamWConfig oc;
  oc.warmup_steps = 1;
  oc.total_steps = 6;
  ModelParams a(mc), b(mc);
  ModelGrads g(mc);
  for (size_t i = 0; i < g.flat().size(); ++i) g.flat()[i] = std::cos(static_cast<float>(i));
  AdamW oa(mc, oc);
  for (int s = 0; s < 3; ++s) oa.step(a, g);
  std::copy(a.flat().begin(), a.flat().end(), b.flat().begin());
  AdamW ob(mc, oc);
  ob.restore(oa.steps_taken(), oa.first_moment(), oa.second_moment());
  EXPECT_EQ(ob.steps_taken(), 3);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(oa.step(a, g), ob.step(b, g));
  EXPECT_EQ(a.digest(), b.digest());
  const std::vector<float> short_moments(3);
  EXPECT_THROW(ob.restore(1, short_moments, short_moments), Error);
  EXPECT_THROW(ob.restore(-1, oa.first_moment(), oa.second_moment()), Error);
}

TEST(AdamW, ConfigErrorsAndModelMismatch) {
  AdamWConfig c;
  c.beta2 = 1.0;
  EXPECT_THROW(validate_adamw(c), Error);
  c = {};
  c.min_lr_ratio = 1.5;
  EXPECT_THROW(validate_adamw(c), Error);
  c = {};
  c.total_steps = 0;
  EXPECT_THROW(AdamW(tiny(), c), Error);
  ModelConfig bigger = tiny();
  bigger.layers = 2;
  AdamW opt(tiny(), AdamWConfig{});
  ModelParams p(bigger);
  ModelGrads g(bigger);
  EXPECT_THROW(opt.step(p, g), Error);
}

}  // namespace
}  // namespace cpattn::train
