// The transformer on CP shards (train/model.h): each rank gets its layout's inputs and targets,
// the hand-chained backward through real cpattn attention (with dropout) matches finite
// differences, and recompute keeps at most one ForwardResult alive per rank.
#include "train/model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/thread_communicator.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

using testing::expect_grad_near;
using testing::numeric_grad;
using testing::spread_indices;

// Bytes in [0, vocab) from a fixed recurrence: enough structure for a loss, no file needed.
std::vector<uint8_t> small_text(size_t n, int vocab) {
  std::vector<uint8_t> t(n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    t[i] = static_cast<uint8_t>((x >> 16) % static_cast<uint32_t>(vocab));
  }
  return t;
}

TEST(ShardBatch, EachRankHoldsItsLayoutTokensAndTheirTargets) {
  const std::vector<uint8_t> text = small_text(200, 256);
  const BatchSampler sampler(text, 11, 3, 7);
  const Batch batch = sampler.sample(4);
  for (const Layout layout : {Layout::kZigzag, Layout::kStriped, Layout::kContiguous}) {
    std::vector<int> seen(static_cast<size_t>(batch.batch * batch.seq_len), 0);
    for (int r = 0; r < 3; ++r) {
      SequenceSharding seq = SequenceSharding::of(layout, 11, 3, r);
      const ShardBatch shard = shard_batch(batch, seq);
      const std::vector<int64_t> idx = shard_token_indices(seq, r);
      ASSERT_EQ(shard.local_len, static_cast<int64_t>(idx.size()));
      EXPECT_EQ(shard.total_tokens, 33);
      for (int64_t b = 0; b < 3; ++b) {
        for (size_t i = 0; i < idx.size(); ++i) {
          const size_t row = static_cast<size_t>(b * shard.local_len) + i;
          const size_t global = static_cast<size_t>(b * 11 + idx[i]);
          EXPECT_EQ(shard.inputs[row], batch.inputs[global]);
          EXPECT_EQ(shard.targets[row], batch.targets[global]);
          EXPECT_EQ(shard.row_positions[row], idx[i]);
          ++seen[global];
        }
      }
    }
    for (int count : seen) EXPECT_EQ(count, 1) << layout_name(layout);
  }
}

TEST(ShardBatch, RejectsAShardingOfAnotherLength) {
  const std::vector<uint8_t> text = small_text(100, 256);
  const Batch batch = BatchSampler(text, 10, 1, 0).sample(0);
  SequenceSharding seq;
  seq.seq_len = 12;
  EXPECT_THROW(shard_batch(batch, seq), Error);
}

struct ModelSetup {
  ModelConfig model;
  int cp = 2;
  Layout layout = Layout::kZigzag;
  int64_t seq_len = 9;
  int64_t batch = 2;
  float dropout = 0.1f;
  DType activations = DType::kF32;
};

// Global loss of step 0; when `grads` is given, also the all-reduced gradients (from rank 0).
double run_step(const ModelSetup& s, const ModelParams& params, const std::vector<uint8_t>& text,
                bool recompute, std::vector<float>* grads) {
  double loss = 0.0;
  run_ranks(s.cp, [&](Communicator& comm) {
    ModelGrads g(s.model, &comm.memory());
    StepOptions options;
    options.seq.layout = s.layout;
    options.seq.seq_len = s.seq_len;
    options.seq.cp_size = s.cp;
    options.seq.cp_rank = comm.rank();
    options.dropout = s.dropout;
    options.recompute = recompute;
    options.activations = s.activations;
    Generator generator(99);
    const Batch batch = BatchSampler(text, s.seq_len, s.batch, 3).sample(0);
    const double l =
        forward_backward(comm, params, shard_batch(batch, options.seq), options, generator, g);
    comm.allreduce_sum(g.flat());
    if (comm.rank() == 0) {
      loss = l;
      if (grads != nullptr) grads->assign(g.flat().begin(), g.flat().end());
    }
  });
  return loss;
}

struct FdCase {
  int cp;
  bool recompute;
  float dropout;
};

class ModelFiniteDifference : public ::testing::TestWithParam<FdCase> {};

// Every parameter tensor, a few entries each: the backward through embedding, RMSNorm, fused QKV,
// RoPE, ring attention (GQA, causal, dropout), output projection, MLP, LM head and
// cross-entropy against central differences of the same sharded forward.
TEST_P(ModelFiniteDifference, EveryParameterTensor) {
  ModelSetup s;
  s.model.layers = 2;
  s.model.d_model = 8;
  s.model.heads = 2;
  s.model.kv_heads = 1;
  s.model.vocab = 16;
  s.model.seed = 5;
  s.cp = GetParam().cp;
  s.dropout = GetParam().dropout;
  const std::vector<uint8_t> text = small_text(64, 16);
  ModelParams params(s.model);
  // Larger weights than the 0.02 init so every path carries signal well above float noise.
  for (float& w : params.flat()) w *= 3.0f;
  std::vector<float> analytic;
  run_step(s, params, text, GetParam().recompute, &analytic);
  for (const ParamInfo& info : params.infos()) {
    const auto idx = spread_indices(static_cast<size_t>(info.numel), 4);
    const std::vector<double> numeric = numeric_grad(
        params.get(info), [&] { return run_step(s, params, text, false, nullptr); }, idx);
    expect_grad_near(std::span<const float>(analytic).subspan(static_cast<size_t>(info.offset),
                                                              static_cast<size_t>(info.numel)),
                     numeric, 2e-2, info.name, idx);
  }
}

INSTANTIATE_TEST_SUITE_P(Train, ModelFiniteDifference,
                         ::testing::Values(FdCase{1, false, 0.0f}, FdCase{2, true, 0.1f},
                                           FdCase{3, false, 0.1f}),
                         [](const ::testing::TestParamInfo<FdCase>& p) {
                           return "cp" + std::to_string(p.param.cp) +
                                  (p.param.recompute ? "_recompute" : "_full") +
                                  (p.param.dropout > 0 ? "_dropout" : "_nodropout");
                         });

// Recompute keeps only checkpoints between forward and backward: one ForwardResult per rank at a
// time, against one per layer and rank without it; none survives the step either way.
TEST(ModelLifecycle, RecomputeHoldsOneForwardResultPerRank) {
  ModelSetup s;
  s.model.layers = 3;
  s.model.d_model = 16;
  s.model.heads = 2;
  s.model.kv_heads = 2;
  s.model.vocab = 16;
  s.cp = 2;
  s.seq_len = 12;
  const std::vector<uint8_t> text = small_text(64, 16);
  const ModelParams params(s.model);
  for (const bool recompute : {true, false}) {
    process_memory().reset_peak();
    run_step(s, params, text, recompute, nullptr);
    const StateMemoryStats stats = memory_stats();
    EXPECT_EQ(stats.live_forward_results, 0);
    if (recompute) {
      // Ranks are threads: their single states may or may not overlap in time.
      EXPECT_GE(stats.peak_forward_results, 1);
      EXPECT_LE(stats.peak_forward_results, s.cp);
    } else {
      // Every rank holds all its layers' states when the first backward ring starts.
      EXPECT_EQ(stats.peak_forward_results, s.cp * s.model.layers);
    }
  }
}

// bf16 / fp16 attention activations: q, k, v, out and their gradients really are rounded (the
// gradients differ from the fp32 run's), stay within a few of the dtype's unit roundoffs of them
// (the step is the same math), and recompute is still bitwise equal to full storage.
TEST(ModelDtype, SixteenBitActivationsStayNearFp32AndRecomputeIsBitwise) {
  ModelSetup s;
  s.model.layers = 2;
  s.model.d_model = 32;
  s.model.heads = 4;
  s.model.kv_heads = 2;
  s.model.vocab = 32;
  s.cp = 2;
  s.seq_len = 24;
  s.dropout = 0.1f;
  const std::vector<uint8_t> text = small_text(96, 32);
  const ModelParams params(s.model);
  std::vector<float> fp32;
  const double loss32 = run_step(s, params, text, false, &fp32);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    s.activations = dtype;
    std::vector<float> full, again;
    const double loss = run_step(s, params, text, false, &full);
    EXPECT_EQ(run_step(s, params, text, true, &again), loss) << dtype_name(dtype);
    EXPECT_EQ(again, full) << dtype_name(dtype);
    double diff = 0.0, ref = 0.0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(full[i]) - fp32[i]));
      ref = std::max(ref, std::abs(static_cast<double>(fp32[i])));
    }
    EXPECT_GT(diff, 0.0) << dtype_name(dtype) << ": nothing was rounded";
    EXPECT_LE(diff / ref, 8.0 * unit_roundoff(dtype)) << dtype_name(dtype);
    EXPECT_LE(std::abs(loss - loss32) / loss32, 2.0 * unit_roundoff(dtype)) << dtype_name(dtype);
  }
}

TEST(ModelLifecycle, RecomputeAndFullStorageGiveBitwiseEqualGradients) {
  ModelSetup s;
  s.model.layers = 2;
  s.model.d_model = 16;
  s.model.heads = 4;
  s.model.kv_heads = 2;
  s.model.vocab = 16;
  s.cp = 3;
  s.layout = Layout::kStriped;
  s.seq_len = 13;
  s.dropout = 0.3f;
  const std::vector<uint8_t> text = small_text(64, 16);
  const ModelParams params(s.model);
  std::vector<float> a, b;
  EXPECT_EQ(run_step(s, params, text, true, &a), run_step(s, params, text, false, &b));
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace cpattn::train
