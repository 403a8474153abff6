// The training job (train/trainer.h): --check passes for cp in {1, 2, 3} x {zigzag, striped}
// with dropout, a short run's loss falls with replicas bitwise identical, the check catches a
// wrong gradient, and bad configurations fail before any rank starts.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"
#include "run_fixture.h"

namespace cpattn::train {
namespace {

using testing::tiny_config;
using testing::training_text;

struct CheckCase {
  int cp;
  Layout layout;
  DType dtype = DType::kF32;  ///< of attention's activations (TrainConfig::dtype)
};

class TrainCheck : public ::testing::TestWithParam<CheckCase> {};

TEST_P(TrainCheck, StepZeroAgreesThreeWays) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = tiny_config();
  c.cp = GetParam().cp;
  c.layout = GetParam().layout;
  c.dtype = GetParam().dtype;
  validate_train_config(c, text);
  const CheckReport report = run_check(c, text, thread_group(c.cp));
  EXPECT_EQ(report.tolerance, check_tolerance(c.dtype));
  ASSERT_EQ(report.pairs.size(), 3u);
  for (const CheckPair& p : report.pairs) {
    EXPECT_TRUE(p.passed) << p.name << ": loss " << p.loss_rel << ", grad " << p.grad_rel << " at "
                          << p.worst_tensor;
  }
  EXPECT_TRUE(report.passed);
  // Recompute replays the same dropout stream on the same inputs: bitwise equal.
  EXPECT_EQ(report.pairs[0].loss_rel, 0.0);
  EXPECT_EQ(report.pairs[0].grad_rel, 0.0);
  EXPECT_EQ(memory_stats().live_forward_results, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Train, TrainCheck,
    ::testing::Values(CheckCase{1, Layout::kZigzag}, CheckCase{2, Layout::kZigzag},
                      CheckCase{3, Layout::kZigzag}, CheckCase{1, Layout::kStriped},
                      CheckCase{2, Layout::kStriped}, CheckCase{3, Layout::kStriped},
                      CheckCase{2, Layout::kZigzag, DType::kBF16},
                      CheckCase{3, Layout::kStriped, DType::kBF16},
                      CheckCase{2, Layout::kZigzag, DType::kF16}),
    [](const ::testing::TestParamInfo<CheckCase>& p) {
      return std::string(layout_name(p.param.layout)) + "_cp" + std::to_string(p.param.cp) + "_" +
             dtype_name(p.param.dtype);
    });

// The bound of --check is fp32's 1e-5, or the unit roundoff of 16-bit activations.
TEST(TrainCheck, ToleranceFollowsTheActivationDtype) {
  EXPECT_EQ(check_tolerance(DType::kF32), kCheckTolerance);
  EXPECT_EQ(check_tolerance(DType::kBF16), 0x1.0p-8);
  EXPECT_EQ(check_tolerance(DType::kF16), 0x1.0p-11);
}

TEST(TrainCheck, ComparisonCatchesAWrongGradient) {
  TrainConfig c = tiny_config();
  c.cp = 2;
  const std::vector<uint8_t> text = training_text();
  validate_train_config(c, text);
  StepGradients a, b;
  run_ranks(2, [&](Communicator& comm) {
    StepGradients g = step_zero(comm, c, text, true);
    if (comm.rank() == 0) a = std::move(g);
  });
  b = a;
  EXPECT_TRUE(compare_gradients("same", c.model, a, b, kCheckTolerance).passed);
  // A 1e-4 relative error in one entry of one tensor must be caught and named.
  const std::vector<ParamInfo> infos = param_table(c.model);
  const ParamInfo& wo = infos[3];
  ASSERT_EQ(wo.name, "layers.0.attn.wo");
  float max_abs = 0.0f;
  for (int64_t i = wo.offset; i < wo.offset + wo.numel; ++i) {
    max_abs = std::max(max_abs, std::abs(b.grads[static_cast<size_t>(i)]));
  }
  b.grads[static_cast<size_t>(wo.offset + 5)] += 1e-4f * max_abs;
  const CheckPair bad = compare_gradients("perturbed", c.model, b, a, kCheckTolerance);
  EXPECT_FALSE(bad.passed);
  EXPECT_EQ(bad.worst_tensor, "layers.0.attn.wo");
  EXPECT_NEAR(bad.grad_rel, 1e-4, 2e-6);
}

TEST(Train, LossFallsAndReplicasStayIdentical) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = tiny_config();
  c.cp = 2;
  c.steps = 40;
  c.adamw.lr = 1e-2;
  c.adamw.warmup_steps = 4;
  validate_train_config(c, text);
  int64_t reported = 0;
  TrainHooks hooks;
  hooks.on_step = [&](const StepMetrics& m) {
    ++reported;
    EXPECT_EQ(m.step, reported);
    EXPECT_GT(m.tokens_per_s, 0.0);
  };
  const TrainResult r = train(c, text, thread_group(c.cp), hooks);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_EQ(reported, 40);
  EXPECT_EQ(r.tokens, 40 * 2 * 37);
  // From ~ln(256) = 5.5 at init; the word text's byte entropy is below 3 nats.
  EXPECT_GT(r.losses.front(), 5.0);
  EXPECT_LT(r.final_loss(), r.losses.front() - 2.0);
  EXPECT_EQ(memory_stats().live_forward_results, 0);

  // Same seed, no recompute: the same run (recompute only changes what is stored).
  c.recompute = false;
  const TrainResult again = train(c, text, thread_group(c.cp));
  EXPECT_EQ(again.weight_digest, r.weight_digest);
  EXPECT_EQ(again.losses, r.losses);
}

// The one list of a run's settings: every flag appears once, values change with the setting, and
// only the settings that shape the weights are marked as training settings.
TEST(ConfigFields, ListEverySettingOnceWithItsValue) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = tiny_config();
  validate_train_config(c, text);
  const std::vector<ConfigField> fields = config_fields(c, text, "/t.txt");
  std::vector<std::string> flags;
  for (const ConfigField& f : fields) flags.push_back(f.flag);
  std::vector<std::string> sorted = flags;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  const auto field = [&](const std::vector<ConfigField>& fs, const std::string& flag) {
    for (const ConfigField& f : fs) {
      if (f.flag == flag) return f;
    }
    ADD_FAILURE() << flag << " missing";
    return ConfigField{};
  };
  EXPECT_EQ(field(fields, "--text").note, "/t.txt");
  EXPECT_TRUE(field(fields, "--text").value.starts_with(std::to_string(text.size()) + " bytes"));
  EXPECT_EQ(field(fields, "--dropout").value, "0.1");
  EXPECT_EQ(field(fields, "--layout").value, "zigzag");
  EXPECT_TRUE(field(fields, "--seed").training);
  EXPECT_FALSE(field(fields, "--recompute").training);
  EXPECT_FALSE(field(fields, "--on-nonfinite").training);
  // --dtype is listed (and must match on resume) only when it is not fp32, as before it existed.
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--dtype"), 0);
  TrainConfig bf16 = c;
  bf16.dtype = DType::kBF16;
  EXPECT_EQ(field(config_fields(bf16, text, ""), "--dtype").value, "bf16");
  EXPECT_TRUE(field(config_fields(bf16, text, ""), "--dtype").training);
  TrainConfig other = c;
  other.adamw.lr = std::nextafter(c.adamw.lr, 1.0);
  EXPECT_NE(field(config_fields(other, text, ""), "--lr").value, field(fields, "--lr").value);
  std::vector<uint8_t> changed = text;
  changed[7] ^= 1;
  EXPECT_NE(field(config_fields(c, changed, "/t.txt"), "--text").value,
            field(fields, "--text").value);
}

TEST(TrainConfigValidation, BadValuesFailBeforeAnyRankStarts) {
  const std::vector<uint8_t> text = training_text();
  const auto fails = [&](const std::function<void(TrainConfig&)>& edit, const std::string& what) {
    TrainConfig c = tiny_config();
    edit(c);
    try {
      validate_train_config(c, text);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails([](TrainConfig& c) { c.cp = 0; }, "--cp must be >= 1, got 0");
  fails([](TrainConfig& c) { c.model.heads = 5; }, "--heads (5) must divide --d-model (24)");
  fails([](TrainConfig& c) { c.seq_len = 5000; }, "needs at least 5001");
  fails([](TrainConfig& c) { c.cp = 40; }, "--seq must be >= --cp");
  fails([](TrainConfig& c) { c.dropout = 1.0f; }, "--dropout: dropout_p must be in [0, 1)");
  fails([](TrainConfig& c) { c.steps = 0; }, "--steps must be >= 1");
  fails(
      [](TrainConfig& c) {
        c.cp = 3;  // 3 heads, 1 kv head: Ulysses runs them on 3 ranks
        c.strategy = Strategy::ulysses();
        c.dtype = DType::kBF16;
      },
      "--dtype bf16: strategy ulysses takes fp32 tensors only, got bf16");
}

}  // namespace
}  // namespace cpattn::train
