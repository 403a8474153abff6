// Generation (train/generate.h): the inference forward is the training forward (the same loss
// bits; the one-rank next-byte distribution equals the CP training forward's within float
// reordering), sampling follows temperature and top-k, and text generated from a trained
// checkpoint is a pure function of the seed.
#include "train/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpattn/generator.h"
#include "cpattn/thread_communicator.h"
#include "run_fixture.h"
#include "train/data.h"
#include "train/model.h"
#include "train/trainer.h"

namespace cpattn::train {
namespace {

using testing::tiny_config;
using testing::training_text;

// A briefly trained model (so that its distribution is not uniform) and its checkpoint.
Checkpoint trained_checkpoint() {
  const std::vector<uint8_t> text = training_text();
  TrainConfig c = tiny_config();
  c.cp = 2;
  c.steps = 12;
  c.adamw.lr = 1e-2;
  validate_train_config(c, text);
  Checkpoint saved;
  TrainHooks hooks;
  hooks.save = [&](const Checkpoint& ck) { saved = ck; };
  train(c, text, thread_group(c.cp), hooks);
  return saved;
}

std::vector<double> softmax(const std::vector<float>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p;
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l - top);
  for (float l : logits) p.push_back(std::exp(l - top) / sum);
  return p;
}

TEST(Generate, InferenceForwardIsTheTrainingForward) {
  const Checkpoint ck = trained_checkpoint();
  const ModelParams params = checkpoint_params(ck);
  const std::vector<uint8_t> text = training_text();
  const int64_t seq = 37;
  const Batch batch = evenly_spaced_batch(text, seq, 1);
  // The CP=2 training forward (dropout off): its loss is forward_loss's, bit for bit, and the
  // logits of the window's last token are the next-byte logits of the window on one rank.
  std::vector<float> cp_last;
  run_ranks(2, [&](Communicator& comm) {
    StepOptions o;
    o.seq = SequenceSharding::of(Layout::kZigzag, seq, 2, comm.rank());
    o.dropout = 0.0f;
    const ShardBatch shard = shard_batch(batch, o.seq);
    Generator g1(3), g2(3);
    ModelGrads grads(params.config(), &comm.memory());
    const double trained = forward_backward(comm, params, shard, o, g1, grads);
    EXPECT_EQ(forward_loss(comm, params, shard, o, g2), trained);
    EXPECT_EQ(g1.state(), g2.state());  // one RngState per layer either way
    Generator g3(3);
    const Tensor logits = forward_logits(comm, params, shard, o, g3);
    for (int64_t row = 0; row < shard.rows(); ++row) {
      if (shard.row_positions[static_cast<size_t>(row)] != seq - 1) continue;
      const float* l = logits.data() + row * params.config().vocab;
      cp_last.assign(l, l + params.config().vocab);
    }
  });
  ASSERT_EQ(cp_last.size(), 256u);
  std::vector<float> one;
  run_ranks(1, [&](Communicator& comm) {
    const std::vector<uint8_t> window(text.begin(), text.begin() + seq);
    one = next_byte_logits(comm, params, window, 1);
  });
  const std::vector<double> p = softmax(one), q = softmax(cp_last);
  double worst = 0.0;
  for (size_t v = 0; v < p.size(); ++v) worst = std::max(worst, std::abs(p[v] - q[v]));
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(*std::max_element(p.begin(), p.end()), 2.0 / 256);  // trained: not uniform
}

TEST(Generate, SamplingFollowsTemperatureAndTopK) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  EXPECT_EQ(sample_index(logits, 0.0, 0, 0.99), 1);  // greedy: the first largest
  EXPECT_EQ(sample_index(logits, 1.0, 1, 0.99), 1);  // top-1 is greedy
  EXPECT_EQ(sample_index(logits, 1.0, 2, 0.49), 1);  // top-2: {1, 3}, equally likely
  EXPECT_EQ(sample_index(logits, 1.0, 2, 0.51), 3);
  // Full softmax, order 1, 3, 2, 0: p = e^2, e^2, e, 1 over their sum.
  const double z = 2 * std::exp(2.0) + std::exp(1.0) + 1.0;
  EXPECT_EQ(sample_index(logits, 1.0, 0, (2 * std::exp(2.0) + 0.5 * std::exp(1.0)) / z), 2);
  EXPECT_EQ(sample_index(logits, 1.0, 0, 0.9999), 0);
  // A high temperature flattens: u just below 3/4 picks the third most likely.
  EXPECT_EQ(sample_index(logits, 1e6, 0, 0.7499), 2);
  const std::vector<float> empty;
  EXPECT_THROW(sample_index(empty, 1.0, 0, 0.5), Error);
}

TEST(Generate, TextFromATrainedCheckpointIsAPureFunctionOfTheSeed) {
  const Checkpoint ck = decode_checkpoint(encode_checkpoint(trained_checkpoint()), "mem");
  const ModelParams params = checkpoint_params(ck);
  const std::vector<uint8_t> prompt = {'t', 'h', 'e', ' '};
  SampleOptions o;
  o.tokens = 40;
  o.temperature = 0.8;
  o.top_k = 20;
  o.seed = 3;
  o.context = ck.seq_len;
  const std::vector<uint8_t> a = generate_bytes(params, prompt, o);
  const std::vector<uint8_t> b = generate_bytes(checkpoint_params(ck), prompt, o);
  ASSERT_EQ(a.size(), 40u);
  EXPECT_EQ(a, b);
  o.seed = 4;
  EXPECT_NE(generate_bytes(params, prompt, o), a);
  // Greedy decoding needs no seed: every seed gives the same text.
  o.temperature = 0.0;
  const std::vector<uint8_t> g = generate_bytes(params, prompt, o);
  o.seed = 5;
  EXPECT_EQ(generate_bytes(params, prompt, o), g);
  EXPECT_THROW(generate_bytes(params, {}, o), Error);
  o.temperature = -1.0;
  EXPECT_THROW(generate_bytes(params, prompt, o), Error);
}

}  // namespace
}  // namespace cpattn::train
