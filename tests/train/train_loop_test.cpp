// The training loop (train/trainer.h train()): a run stopped at a step boundary and resumed from
// its checkpoint (in memory and through the file format) gives bitwise the losses and weights of
// an uninterrupted run; a stop request from any rank stops every rank at the same step; a
// non-finite loss or gradient stops the run (or skips the update) naming the step and tensor;
// the held-out loss is evaluated on the text's tail; a failing save fails every rank alike.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "run_fixture.h"
#include "support/errors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace cpattn::train {
namespace {

using testing::tiny_config;
using testing::training_text;

TrainConfig run_config(int cp, int64_t steps) {
  TrainConfig c = tiny_config();
  c.cp = cp;
  c.steps = steps;
  c.adamw.lr = 1e-2;
  c.adamw.warmup_steps = 3;
  c.eval_every = 4;
  return c;
}

// Hooks that request a stop (kInterrupt, as SIGINT would) once `after` updates are done and keep
// every checkpoint handed to save.
struct StopAfter {
  explicit StopAfter(int64_t after) : after_(after) {}
  TrainHooks hooks(int64_t save_every = 0) {
    TrainHooks h;
    h.on_step = [this](const StepMetrics& m) { done_.store(m.step); };
    h.poll_stop = [this] {
      return done_.load() >= after_ ? StopRequest::kInterrupt : StopRequest::kNone;
    };
    h.save = [this](const Checkpoint& c) {
      const std::lock_guard<std::mutex> lock(mu_);
      saved.push_back(c);
    };
    h.save_every = save_every;
    return h;
  }
  std::vector<Checkpoint> saved;

 private:
  int64_t after_;
  std::atomic<int64_t> done_{0};
  std::mutex mu_;
};

TEST(TrainLoop, ResumedRunIsBitwiseTheUninterruptedRun) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(2, 14);
  validate_train_config(c, text);
  const TrainResult whole = train(c, text, thread_group(c.cp));
  ASSERT_EQ(whole.losses.size(), 14u);
  ASSERT_EQ(whole.end, RunEnd::kCompleted);

  // Stop after 5 updates (the checkpoint of step 5), resume through the file format, stop again
  // after 9, resume again to the end.
  StopAfter first(5);
  const TrainResult a = train(c, text, thread_group(c.cp), first.hooks());
  EXPECT_EQ(a.end, RunEnd::kStopped);
  EXPECT_EQ(a.stop, StopRequest::kInterrupt);
  EXPECT_EQ(a.steps_done, 5);
  EXPECT_EQ(a.saved_step, 5);
  ASSERT_EQ(first.saved.size(), 1u);
  const Checkpoint at5 = decode_checkpoint(encode_checkpoint(first.saved.back()), "mem");
  StopAfter second(9);
  const TrainResult b = train(c, text, thread_group(c.cp), second.hooks(), &at5);
  EXPECT_EQ(b.first_step, 5);
  EXPECT_EQ(b.steps_done, 9);
  ASSERT_EQ(second.saved.size(), 1u);
  const TrainResult rest = train(c, text, thread_group(c.cp), {}, &second.saved.back());
  EXPECT_EQ(rest.end, RunEnd::kCompleted);
  EXPECT_EQ(rest.first_step, 9);
  EXPECT_EQ(rest.tokens, 5 * c.batch * c.seq_len);
  EXPECT_EQ(rest.losses, whole.losses);  // the history and every later loss, bitwise
  EXPECT_EQ(rest.evals, whole.evals);
  EXPECT_EQ(rest.weight_digest, whole.weight_digest);
  EXPECT_EQ(memory_stats().live_forward_results, 0);
}

TEST(TrainLoop, PeriodicAndFinalCheckpointsRecordTheirStep) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(3, 7);
  validate_train_config(c, text);
  StopAfter never(1000);
  const TrainResult r = train(c, text, thread_group(c.cp), never.hooks(3));
  ASSERT_EQ(never.saved.size(), 3u);  // after 3, after 6, and the final one
  EXPECT_EQ(never.saved[0].step, 3);
  EXPECT_EQ(never.saved[1].step, 6);
  EXPECT_EQ(never.saved[2].step, 7);
  EXPECT_EQ(r.saved_step, 7);
  const Checkpoint& last = never.saved[2];
  EXPECT_EQ(last.losses, r.losses);
  EXPECT_EQ(last.data_position, 7);
  EXPECT_EQ(last.adam_steps, 7);
  EXPECT_EQ(last.generator.offset, 7u * static_cast<uint64_t>(c.model.layers));
  // Resuming a finished run trains nothing and reports the same weights.
  const TrainResult again = train(c, text, thread_group(c.cp), {}, &last);
  EXPECT_EQ(again.weight_digest, r.weight_digest);
  EXPECT_EQ(again.tokens, 0);
}

TEST(TrainLoop, AStopRequestOfOneRankStopsEveryRankAtTheSameStep) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(3, 10);
  validate_train_config(c, text);
  std::atomic<int> polls{0};
  TrainHooks hooks;
  // Only the third poll of one rank (of 3 ranks: the boundary before update 1 or 2) asks.
  hooks.poll_stop = [&] { return ++polls == 3 ? StopRequest::kTerminate : StopRequest::kNone; };
  const TrainResult r = train(c, text, thread_group(c.cp), hooks);
  EXPECT_EQ(r.end, RunEnd::kStopped);
  EXPECT_EQ(r.stop, StopRequest::kTerminate);
  EXPECT_LE(r.steps_done, 1);
  EXPECT_EQ(polls.load(), 3 * static_cast<int>(r.steps_done + 1));  // every rank stopped there
}

TEST(TrainLoop, ResumeUnderOtherSettingsIsRefusedNamingThem) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(2, 4);
  validate_train_config(c, text);
  StopAfter stop(2);
  train(c, text, thread_group(c.cp), stop.hooks());
  ASSERT_FALSE(stop.saved.empty());
  TrainConfig other = c;
  other.adamw.lr = 2e-2;
  other.seed = 12;
  validate_train_config(other, text);
  try {
    train(other, text, thread_group(other.cp), {}, &stop.saved.back());
    ADD_FAILURE() << "resumed under other settings";
  } catch (const GroupError& e) {
    EXPECT_EQ(std::string(e.what()),
              "resume checkpoint: the checkpoint was written by a run with other settings: --lr "
              "0.01 in the checkpoint, 0.02 now; --seed 11 in the checkpoint, 12 now");
  }
  other = c;
  other.eval_every = 2;  // evaluation does not shape the weights: allowed
  validate_train_config(other, text);
  train(other, text, thread_group(other.cp), {}, &stop.saved.back());
}

TEST(TrainLoop, ANonFiniteLossOrGradientStopsAtItsStep) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(2, 20);
  c.adamw.lr = 1e6;  // weights of order 1e6 after one update: the next step overflows
  c.adamw.warmup_steps = 0;
  c.eval_every = 0;
  validate_train_config(c, text);
  StopAfter never(1000);
  const TrainResult r = train(c, text, thread_group(c.cp), never.hooks());
  EXPECT_EQ(r.end, RunEnd::kNonFinite);
  ASSERT_GE(r.steps_done, 1);
  EXPECT_LT(r.steps_done, 20);
  const std::string step = " at step " + std::to_string(r.steps_done + 1);
  EXPECT_NE(r.nonfinite.find(step), std::string::npos) << r.nonfinite;
  EXPECT_TRUE(r.nonfinite.starts_with("non-finite loss") ||
              r.nonfinite.find("(first non-finite value in ") != std::string::npos)
      << r.nonfinite;
  for (double loss : r.losses) EXPECT_TRUE(std::isfinite(loss));
  // The last good state is saved: the weights and the optimizer before the failing step.
  ASSERT_EQ(never.saved.size(), 1u);
  EXPECT_EQ(never.saved[0].step, r.steps_done);
  for (float w : never.saved[0].weights) ASSERT_TRUE(std::isfinite(w));

  c.on_nonfinite = NonFinitePolicy::kSkip;
  const TrainResult skipped = train(c, text, thread_group(c.cp));
  EXPECT_EQ(skipped.end, RunEnd::kCompleted);
  EXPECT_EQ(skipped.steps_done, 20);
  EXPECT_GE(skipped.skipped_steps, 1);
  int64_t nonfinite = 0;
  for (double loss : skipped.losses) nonfinite += std::isfinite(loss) ? 0 : 1;
  EXPECT_LE(nonfinite, skipped.skipped_steps);
}

TEST(TrainLoop, TheHeldOutTailIsEvaluatedAndNeverTrainedOn) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(2, 6);
  c.eval_every = 4;
  validate_train_config(c, text);
  const TextSplit split = split_text(c, static_cast<int64_t>(text.size()));
  EXPECT_EQ(split.held_out_bytes, static_cast<int64_t>(text.size()) / 10);
  EXPECT_EQ(split.train_bytes + split.held_out_bytes, static_cast<int64_t>(text.size()));
  std::vector<std::optional<double>> evals;
  TrainHooks hooks;
  hooks.on_step = [&](const StepMetrics& m) { evals.push_back(m.eval_loss); };
  const TrainResult r = train(c, text, thread_group(c.cp), hooks);
  ASSERT_EQ(r.evals.size(), 2u);  // after 4 and after the last (6)
  EXPECT_EQ(r.evals[0].step, 4);
  EXPECT_EQ(r.evals[1].step, 6);
  ASSERT_EQ(evals.size(), 6u);
  EXPECT_TRUE(evals[3].has_value() && evals[5].has_value());
  EXPECT_FALSE(evals[0].has_value() || evals[4].has_value());
  EXPECT_EQ(*evals[5], r.evals[1].loss);
  EXPECT_GT(r.evals[1].loss, 0.0);
  // Corrupting the held-out tail changes the held-out loss but not training.
  std::vector<uint8_t> other = text;
  for (size_t i = static_cast<size_t>(split.train_bytes); i < other.size(); ++i) other[i] = 'z';
  const TrainResult o = train(c, other, thread_group(c.cp));
  EXPECT_EQ(o.losses, r.losses);
  EXPECT_EQ(o.weight_digest, r.weight_digest);
  EXPECT_NE(o.evals[1].loss, r.evals[1].loss);
  // Without evaluation nothing is held out: the tail trains too.
  c.eval_every = 0;
  validate_train_config(c, text);
  EXPECT_EQ(split_text(c, static_cast<int64_t>(text.size())).held_out_bytes, 0);
  // A text too short for both parts is refused before any rank starts.
  c.eval_every = 1;
  c.seq_len = 2500;
  c.batch = 1;
  const Error e = cpattn::testing::error_of([&] { validate_train_config(c, text); });
  EXPECT_NE(std::string(e.what()).find("--eval-every holds out the last 2501 bytes"),
            std::string::npos)
      << e.what();
}

TEST(TrainLoop, AFailingSaveFailsEveryRankAlike) {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = run_config(3, 3);
  validate_train_config(c, text);
  TrainHooks hooks;
  hooks.save = [](const Checkpoint&) { throw Error(ErrorCode::kIo, "disk full"); };
  try {
    train(c, text, thread_group(c.cp), hooks);
    ADD_FAILURE() << "no error";
  } catch (const GroupError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_EQ(std::string(e.what()), "disk full");
  }
}

}  // namespace
}  // namespace cpattn::train
