// A rank that refuses its own arguments still takes part in the call agreement: it takes its
// call number, sends a record marked as refusing (its error code and message), and throws its
// own error, while every other rank throws Error(kRankDisagreement) quoting it. So no rank runs a
// call that a peer refused, and a refusing rank that catches its error cannot line its next call
// up with the others' refused one (the silent mix of data this used to allow).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/recompute.h"
#include "state/stack_harness.h"
#include "support/errors.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

using Case = CausalDropoutCase;

// One way for a rank to get its arguments wrong: what it changes, and a phrase of its error.
struct BadArgument {
  const char* name;
  std::function<void(AttentionParams&, ConstView& k)> apply;
  const char* says;
};

std::vector<BadArgument> bad_arguments() {
  return {
      {"dropout_p=1", [](AttentionParams& a, ConstView&) { a.dropout_p = 1.0f; }, "dropout_p"},
      {"softmax_scale=NaN",
       [](AttentionParams& a, ConstView&) {
         a.softmax_scale = std::numeric_limits<float>::quiet_NaN();
       },
       "softmax_scale"},
      {"window_left=-2", [](AttentionParams& a, ConstView&) { a.window_left = -2; }, "window_left"},
      {"negative k stride", [](AttentionParams&, ConstView& k) { k.stride[1] = -k.stride[1]; },
       "k"},
  };
}

std::vector<std::pair<const char*, Strategy>> strategies() {
  return {{"ring", Strategy::ring()},
          {"allgather", Strategy::allgather()},
          {"ulysses", Strategy::ulysses()},
          {"hybrid:2x2", Strategy::hybrid(2, 2)}};
}

// The refusing rank throws its own error naming the argument; every other rank throws
// kRankDisagreement naming the refusing rank, its error code and that argument.
void expect_refused_everywhere(const RankOutcomes& o, int refusing, const BadArgument& bad,
                               const std::string& what) {
  for (int r = 0; r < kRanks; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (r == refusing) {
      EXPECT_NE(o.codes[i], ErrorCode::kRankDisagreement) << what << ": " << o.messages[i];
      EXPECT_NE(o.codes[i], ErrorCode::kInternal) << what << " (no error)";
      EXPECT_THAT(o.messages[i], HasSubstr(bad.says)) << what;
    } else {
      EXPECT_EQ(o.codes[i], ErrorCode::kRankDisagreement)
          << what << " rank " << r << ": " << o.messages[i];
      EXPECT_THAT(o.messages[i],
                  HasSubstr("rank " + std::to_string(refusing) + " refuses the call"))
          << what << " rank " << r;
      EXPECT_THAT(o.messages[i], HasSubstr(bad.says)) << what << " rank " << r;
    }
  }
}

TEST(Refusal, AForwardRefusedByAnyRankFailsEveryRankForEveryStrategy) {
  const Case c;
  for (const auto& named_strategy : strategies()) {
    const char* strategy_name = named_strategy.first;
    const Strategy& strategy = named_strategy.second;
    for (const BadArgument& bad : bad_arguments()) {
      for (int refusing = 0; refusing < kRanks; ++refusing) {
        const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
          const Tensor x = c.p.shard(c.p.x, kRanks, comm.rank(), &comm.memory());
          AttentionParams params = c.params;
          ConstView k = x.view();
          if (comm.rank() == refusing) bad.apply(params, k);
          CpOptions options;
          options.strategy = strategy;
          attention_forward(comm, x.view(), k, x.view(), c.p.sharding(kRanks, comm.rank()), params,
                            {1, 0}, options);
        });
        expect_refused_everywhere(
            o, refusing, bad,
            std::string(strategy_name) + ", " + bad.name + " on rank " + std::to_string(refusing));
      }
    }
  }
}

TEST(Refusal, BackwardAndRecomputeRefusedByOneRankFailEveryRank) {
  const Case c;
  for (const BadArgument& bad : bad_arguments()) {
    for (int refusing = 0; refusing < kRanks; ++refusing) {
      for (const char* op : {"backward", "recompute"}) {
        const RankOutcomes o = run_all(kRanks, [&](Communicator& comm) {
          const Tensor x = c.p.shard(c.p.x, kRanks, comm.rank(), &comm.memory());
          const SequenceSharding seq = c.p.sharding(kRanks, comm.rank());
          const ForwardResult state =
              attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {1, 0});
          AttentionParams params = c.params;
          ConstView k = x.view();
          if (comm.rank() == refusing) bad.apply(params, k);
          if (std::string(op) == "backward") {
            attention_backward(comm, x.view(), x.view(), k, x.view(), state, seq, params, {1, 0});
          } else {
            recompute_forward(comm, make_checkpoint(state), {1, 0}, x.view(), k, x.view(), seq,
                              params);
          }
        });
        expect_refused_everywhere(
            o, refusing, bad,
            std::string(op) + ", " + bad.name + " on rank " + std::to_string(refusing));
      }
    }
  }
}

// The reproduction: rank 1 catches the refusal of its first call and makes its next call with
// another input but the same record as rank 0's first call. Before, rank 0 ran that call with
// rank 1's second input and returned a silently wrong output; now rank 0's first call raises.
TEST(Refusal, ARefusingRankThatCatchesItsErrorCannotLineUpWithThePeersCall) {
  const Case c;
  const StackProblem other(1, 37, 4, 8, 99);
  std::vector<ErrorCode> first(2, ErrorCode::kInternal);
  std::vector<std::string> first_message(2);
  run_ranks(2, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const Tensor y = c.p.shard(other.x, 2, comm.rank(), &comm.memory());
    AttentionParams params = c.params;
    if (comm.rank() == 1) params.dropout_p = 1.0f;
    try {
      attention_forward(comm, x.view(), x.view(), x.view(), seq, params, {3, 0});
    } catch (const Error& e) {
      first[r] = e.code();
      first_message[r] = e.what();
    }
    // Both go on to their next call, which now is the same call on both ranks.
    attention_forward(comm, y.view(), y.view(), y.view(), seq, c.params, {3, 0});
  });
  EXPECT_EQ(first[1], ErrorCode::kInvalidArgument) << first_message[1];
  EXPECT_EQ(first[0], ErrorCode::kRankDisagreement) << first_message[0];
  EXPECT_THAT(first_message[0], HasSubstr("rank 1 refuses the call (invalid_argument: "));
}

// What only a backward reads (dout, and out/lse of the state) is checked before the agreement
// too: a bf16 dout on an fp32 call, or a dout of another shape through recompute_backward.
TEST(Refusal, BackwardOnlyArgumentsRefusedByOneRankFailEveryRank) {
  const Case c;
  for (const char* op : {"bf16 dout", "short dout in recompute_backward"}) {
    const RankOutcomes o = run_all(2, [&](Communicator& comm) {
      const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
      const SequenceSharding seq = c.p.sharding(2, comm.rank());
      const ForwardResult state =
          attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {1, 0});
      if (std::string(op) == "bf16 dout") {
        const Tensor x16 = dense_copy(x.view(), DType::kBF16, MemoryLayout::kBSHD, &comm.memory());
        const ConstView dout = comm.rank() == 1 ? x16.view() : x.view();
        attention_backward(comm, dout, x.view(), x.view(), x.view(), state, seq, c.params, {1, 0});
      } else {
        ConstView dout = x.view();
        if (comm.rank() == 1) dout.shape[1] -= 1;
        recompute_backward(comm, make_checkpoint(state), {1, 0}, dout, x.view(), x.view(), x.view(),
                           seq, c.params);
      }
    });
    EXPECT_NE(o.codes[1], ErrorCode::kRankDisagreement) << op << ": " << o.messages[1];
    EXPECT_THAT(o.messages[1], HasSubstr("dout")) << op;
    EXPECT_EQ(o.codes[0], ErrorCode::kRankDisagreement) << op << ": " << o.messages[0];
    EXPECT_THAT(o.messages[0], HasSubstr("rank 1 refuses the call")) << op;
    EXPECT_THAT(o.messages[0], HasSubstr("dout")) << op;
  }
}

// A long refusal is quoted up to the record's room, the cut marked, and a state of another call
// is also named by the first field that differs.
TEST(Refusal, ALongRefusalIsCutVisiblyAndTheDifferenceFollows) {
  const Case c;
  const RankOutcomes o = run_all(3, [&](Communicator& comm) {
    const SequenceSharding seq = c.p.sharding(3, comm.rank());
    const Tensor x = c.p.shard(c.p.x, 3, comm.rank(), &comm.memory());
    const Tensor y = c.p.shard(c.p.w, 3, comm.rank(), &comm.memory());
    const ForwardResult fx =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {1, 0});
    const ForwardResult fy =
        attention_forward(comm, y.view(), y.view(), y.view(), seq, c.params, {1, 1});
    // Rank 1 passes the x layer's state to the y layer's backward: inputs and RngState differ.
    attention_backward(comm, y.view(), y.view(), y.view(), y.view(), comm.rank() == 1 ? fx : fy,
                       seq, c.params, {1, 1});
  });
  EXPECT_EQ(o.codes[1], ErrorCode::kStateMismatch) << o.messages[1];
  for (int r : {0, 2}) {
    const std::string& m = o.messages[static_cast<size_t>(r)];
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << m;
    EXPECT_THAT(m, HasSubstr("rank 1 refuses the call (state_mismatch: attention_backward: the "
                             "ForwardResult does not belong to this call: "));
    EXPECT_THAT(m, HasSubstr("...); and rank 1 has forward call number=")) << m;
  }
}

}  // namespace
}  // namespace cpattn::testing
