// The strategy in the safe API: a rank that uses another strategy (or relay) fails the call
// agreement on every rank (naming it), a ForwardResult of one strategy is refused by a backward
// with another, a strategy that cannot run the call fails on every rank, and the fingerprint says
// which.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpattn/error.h"
#include "state/stack_harness.h"
#include "support/errors.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;

using Case = CausalDropoutCase;

TEST(StrategyAgreement, ARankWithAnotherStrategyFailsEveryRankNamingIt) {
  const Case c;
  const RankOutcomes o = run_all(4, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    CpOptions options;
    if (comm.rank() == 2) options.strategy = Strategy::ulysses();
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(4, comm.rank()), c.params,
                      {1, 0}, options);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 2 has strategy=ulysses, ranks 0, 1, 3 have strategy=ring"));
  }
}

// The document-aware relay decides which messages travel: ranks that differ on it would wait
// for messages that are never sent, so the agreement fails the call on every rank at once.
TEST(StrategyAgreement, ARankWithAnotherRelayFailsEveryRankNamingIt) {
  const Case c;
  const RankOutcomes o = run_all(4, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    CpOptions options;
    options.document_aware = comm.rank() != 3;
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(4, comm.rank()), c.params,
                      {1, 0}, options);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 3 has document_aware=false, ranks 0-2 have document_aware=true"));
  }
}

// A backward with sinks makes an allreduce of dsink unless CpOptions::reduce_dsink is false: ranks
// that differ on it fail the agreement, each naming it.
TEST(StrategyAgreement, ARankThatDoesNotReduceDsinkFailsEveryRankNamingIt) {
  const Case c;
  const RankOutcomes o = run_all(4, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    CpOptions options;
    options.reduce_dsink = comm.rank() != 1;
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(4, comm.rank()), c.params,
                      {1, 0}, options);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 1 has reduce_dsink=false, ranks 0, 2, 3 have reduce_dsink=true"));
  }
}

// Ranks that call with other dtypes would exchange blocks of other sizes: the agreement names it.
TEST(StrategyAgreement, ARankWithAnotherDtypeFailsEveryRankNamingIt) {
  const Case c;
  const RankOutcomes o = run_all(4, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    const Tensor x16 = dense_copy(x.view(), DType::kBF16, MemoryLayout::kBSHD, &comm.memory());
    const ConstView in = comm.rank() == 1 ? x16.view() : x.view();
    attention_forward(comm, in, in, in, c.p.sharding(4, comm.rank()), c.params, {1, 0});
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 1 has dtype=bf16, ranks 0, 2, 3 have dtype=fp32"));
  }
}

TEST(StrategyAgreement, AStateOfAnotherStrategyIsRefused) {
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    CpOptions ulysses;
    ulysses.strategy = Strategy::ulysses();
    const ForwardResult state =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {1, 0}, ulysses);
    attention_backward(comm, x.view(), x.view(), x.view(), x.view(), state, seq, c.params, {1, 0},
                       CpOptions{});
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kStateMismatch) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("produced with strategy=ulysses, backward called with strategy=ring"));
  }
}

TEST(StrategyAgreement, AStrategyThatCannotRunTheCallFailsOnEveryRank) {
  const Case c;  // 4 heads
  const RankOutcomes o = run_all(3, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 3, comm.rank(), &comm.memory());
    CpOptions options;
    options.strategy = Strategy::ulysses();
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(3, comm.rank()), c.params,
                      {1, 0}, options);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kInvalidArgument) << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("Hq must be a multiple of 3, got Hq = 4"));
  }
}

TEST(StrategyAgreement, RecomputeWithAnotherStrategyDiverges) {
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    CpOptions hybrid;
    hybrid.strategy = Strategy::hybrid(2, 1);
    const AttentionCheckpoint ckpt = make_checkpoint(
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {1, 0}, hybrid));
    recompute_forward(comm, ckpt, {1, 0}, x.view(), x.view(), x.view(), seq, c.params);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRecomputeDiverged) << r;
    EXPECT_THAT(
        o.messages[static_cast<size_t>(r)],
        HasSubstr("produced with strategy=hybrid:2x1, recompute called with strategy=ring"));
  }
}

TEST(StrategyAgreement, FingerprintNamesTheStrategy) {
  Fingerprint a, b;
  b.strategy = Strategy::hybrid(2, 4);
  const auto diffs = a.differences(b);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0],
            "ForwardResult was produced with strategy=ring, backward called with "
            "strategy=hybrid:2x4");
}

}  // namespace
}  // namespace cpattn::testing
