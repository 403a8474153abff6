// The kernel arithmetic in the safe API (cpattn/isa.h: KernelNumerics): a rank whose path would
// round differently fails the call agreement on every rank, naming it; a backward or recompute
// whose path has other arithmetic than the forward's is refused; one whose path has the same
// arithmetic (avx2 and avx512 for fp32) is accepted and gives the same bits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "state/stack_harness.h"
#include "support/errors.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;

bool available(Isa isa) {
  const std::vector<Isa> all = available_isas();
  return std::find(all.begin(), all.end(), isa) != all.end();
}

using Case = CausalDropoutCase;

CpOptions on(Isa isa) {
  CpOptions options;
  options.isa = isa;
  return options;
}

TEST(NumericsAgreement, ARankOnAnotherArithmeticFailsEveryRankNamingIt) {
  if (!available(Isa::kAvx2)) GTEST_SKIP() << "needs an FMA path beside generic";
  const Case c;
  const RankOutcomes o = run_all(4, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(4, comm.rank()), c.params,
                      {1, 0}, on(comm.rank() == 1 ? Isa::kGeneric : Isa::kAvx2));
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 1 has kernel numerics=no-fma, ranks 0, 2, 3 have kernel "
                          "numerics=fma"));
  }
}

TEST(NumericsAgreement, ABackwardOnAnotherArithmeticIsRefused) {
  if (!available(Isa::kAvx2)) GTEST_SKIP() << "needs an FMA path beside generic";
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    const ForwardResult state = attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params,
                                                  {1, 0}, on(Isa::kGeneric));
    attention_backward(comm, x.view(), x.view(), x.view(), x.view(), state, seq, c.params, {1, 0},
                       on(Isa::kAvx2));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kStateMismatch) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("produced with kernel numerics=no-fma, backward called with kernel "
                          "numerics=fma"));
  }
}

// bf16 on vdpbf16ps rounds P to bf16: a recompute widened to fp32 would not reproduce the
// checkpointed forward, so it is refused before it runs.
TEST(NumericsAgreement, ARecomputeOnTheOtherBf16PathDiverges) {
  if (!available(Isa::kAvx512Bf16)) GTEST_SKIP() << "needs AVX512_BF16";
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const Tensor x16 = dense_copy(x.view(), DType::kBF16, MemoryLayout::kBSHD, &comm.memory());
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    const AttentionCheckpoint ckpt = make_checkpoint(attention_forward(
        comm, x16.view(), x16.view(), x16.view(), seq, c.params, {1, 0}, on(Isa::kAvx512Bf16)));
    RecomputeOptions widened;
    widened.cp.isa = Isa::kAvx512;
    recompute_forward(comm, ckpt, {1, 0}, x16.view(), x16.view(), x16.view(), seq, c.params,
                      widened);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRecomputeDiverged) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)], HasSubstr("kernel numerics=bf16-dot"));
  }
}

// Paths of one class may serve the two halves of a step: the gradients are the same bits.
TEST(NumericsAgreement, ABackwardOnAnotherPathOfTheSameArithmeticGivesTheSameBits) {
  if (!available(Isa::kAvx512)) GTEST_SKIP() << "needs avx2 and avx512";
  const Case c;
  std::vector<std::vector<float>> grads(4);
  run_ranks(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    const ForwardResult state = attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params,
                                                  {1, 0}, on(Isa::kAvx2));
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      const AttentionGradients g = attention_backward(comm, x.view(), x.view(), x.view(), x.view(),
                                                      state, seq, c.params, {1, 0}, on(isa));
      std::vector<float>& out = grads[static_cast<size_t>(comm.rank() * 2 + (isa == Isa::kAvx512))];
      for (const Tensor* t : {&g.dq, &g.dk, &g.dv}) {
        const float* d = t->view().f32();
        out.insert(out.end(), d, d + t->numel());
      }
    }
  });
  for (int r = 0; r < 2; ++r) {
    const auto& avx2 = grads[static_cast<size_t>(2 * r)];
    const auto& avx512 = grads[static_cast<size_t>(2 * r + 1)];
    ASSERT_EQ(avx2.size(), avx512.size());
    ASSERT_FALSE(avx2.empty());
    EXPECT_EQ(std::memcmp(avx2.data(), avx512.data(), avx2.size() * sizeof(float)), 0) << r;
  }
}

TEST(NumericsAgreement, FingerprintNamesTheNumerics) {
  Fingerprint a, b;
  b.numerics = KernelNumerics::kBf16Dot;
  const auto diffs = a.differences(b);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_THAT(diffs[0], HasSubstr("kernel numerics=fma, backward called with kernel "
                                  "numerics=bf16-dot"));
}

}  // namespace
}  // namespace cpattn::testing
