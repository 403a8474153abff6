// Call agreement: ranks that make different checked calls (other parameters, RngState, lengths,
// backward order) all throw kRankDisagreement at once, naming the field and the ranks; a
// backward given the state of another forward on the same inputs is refused (the RngState check
// can fire); and the agreement costs one small exchange per call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "state/stack_harness.h"
#include "support/counting_communicator.h"
#include "support/errors.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;

struct Case {
  StackProblem p{1, 37, 2, 8, 5};
  AttentionParams params;
  Case() {
    params.causal = true;
    params.dropout_p = 0.1f;
  }
};

TEST(CallAgreement, DifferentDropoutOnOneRankFailsEveryRankNamingIt) {
  const Case c;
  const RankOutcomes o = run_all(4, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    AttentionParams params = c.params;
    if (comm.rank() == 3) params.dropout_p = 0.0f;
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(4, comm.rank()), params,
                      {1, 0});
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << "rank " << r;
    EXPECT_EQ(o.messages[static_cast<size_t>(r)],
              "call agreement failed (call 0, forward): rank 3 has dropout_p=0, ranks 0-2 have "
              "dropout_p=0.1");
  }
}

// A wrapper that cannot even read its arguments refuses the call through
// refuse_attention_call: it takes part in the agreement, so the others fail at once quoting it,
// for a forward and for a backward; the refusing rank throws its own error.
TEST(CallAgreement, AWrappersRefusalJoinsTheAgreement) {
  const Case c;
  for (const RefusedCall kind : {RefusedCall::kForward, RefusedCall::kBackward}) {
    const RankOutcomes o = run_all(3, [&](Communicator& comm) {
      const Tensor x = c.p.shard(c.p.x, 3, comm.rank(), &comm.memory());
      if (comm.rank() == 1) {
        refuse_attention_call(comm, Error(ErrorCode::kShapeMismatch, "q is not 4-dimensional"),
                              kind);
      }
      attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(3, comm.rank()), c.params,
                        {1, 0});
    });
    EXPECT_EQ(o.codes[1], ErrorCode::kShapeMismatch);
    EXPECT_EQ(o.messages[1], "q is not 4-dimensional");
    for (const int r : {0, 2}) {
      EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << "rank " << r;
      EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                  HasSubstr("rank 1 refuses the call (shape_mismatch: q is not 4-dimensional)"));
    }
  }
}

// A refusal whose reason has a newline (a wrapper's text) is quoted on one line by the others.
TEST(CallAgreement, ARefusalIsQuotedOnOneLine) {
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    if (comm.rank() == 1) {
      refuse_attention_call(comm, Error(ErrorCode::kInvalidArgument, "my tensor\nis bad"),
                            RefusedCall::kForward);
    }
    attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(2, comm.rank()), c.params,
                      {1, 0});
  });
  EXPECT_EQ(o.codes[0], ErrorCode::kRankDisagreement);
  EXPECT_THAT(o.messages[0], HasSubstr("(invalid_argument: my tensor\\nis bad)"));
  EXPECT_EQ(o.messages[0].find('\n'), std::string::npos);
}

// Each communicator numbers its group's checked calls 0, 1, 2, ...; set_next_call_number moves
// the count (a binding whose communicator lives for one call), and ranks whose counts differ fail
// the agreement naming the call numbers.
TEST(CallAgreement, CallNumbersAreCountedPerGroupAndCanBeSet) {
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const auto forward = [&] {
      return attention_forward(comm, x.view(), x.view(), x.view(), c.p.sharding(2, comm.rank()),
                               c.params, {1, 0});
    };
    EXPECT_EQ(forward().fingerprint.call_number, 0u);
    EXPECT_EQ(forward().fingerprint.call_number, 1u);
    set_next_call_number(comm, 7);
    EXPECT_EQ(forward().fingerprint.call_number, 7u);
    EXPECT_EQ(forward().fingerprint.call_number, 8u);
    if (comm.rank() == 1) set_next_call_number(comm, 12);
    forward();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << "rank " << r;
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 1 has call number=12, rank 0 has call number=9"));
  }
}

TEST(CallAgreement, EachFieldIsCompared) {
  const Case c;
  // field name in the message -> how rank 1 differs
  const std::vector<
      std::pair<std::string, std::function<void(AttentionParams&, SequenceSharding&, RngState&)>>>
      variants = {
          {"causal=false",
           [](AttentionParams& p, SequenceSharding&, RngState&) { p.causal = false; }},
          {"window_left=4",
           [](AttentionParams& p, SequenceSharding&, RngState&) { p.window_left = 4; }},
          {"softmax_scale=",
           [](AttentionParams& p, SequenceSharding&, RngState&) { p.softmax_scale = 0.5f; }},
          {"rng={seed=2, offset=0}",
           [](AttentionParams&, SequenceSharding&, RngState& r) { r.seed = 2; }},
          {"positions/documents digest=",
           [](AttentionParams&, SequenceSharding& s, RngState&) {
             s.docs.assign(37, 0);
             s.docs[30] = 1;
           }},
          // A sink, a softcap, ALiBi slopes, mask slices on one rank only.
          {"sink digest=",
           [](AttentionParams& p, SequenceSharding&, RngState&) {
             p.sink = {0.5f, -0.5f};
           }},
          {"softcap=2", [](AttentionParams& p, SequenceSharding&, RngState&) { p.softcap = 2.0f; }},
          {"alibi_slopes digest=",
           [](AttentionParams& p, SequenceSharding&, RngState&) {
             p.alibi_slopes = {1.0f, 0.5f};
           }},
          {"slices digest=",
           [](AttentionParams& p, SequenceSharding&, RngState&) {
             p.slices = {{0, 37, 0, 37, SliceType::kFull}};
           }},
      };
  for (const auto& variant : variants) {
    const std::string& needle = variant.first;
    const auto& change = variant.second;
    const RankOutcomes o = run_all(2, [&](Communicator& comm) {
      const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
      AttentionParams params = c.params;
      SequenceSharding seq = c.p.sharding(2, comm.rank());
      RngState rng{1, 0};
      if (comm.rank() == 1) change(params, seq, rng);
      // Documents are given on both ranks or on neither (else the shardings are refused).
      if (comm.rank() == 0 && needle.starts_with("positions")) seq.docs.assign(37, 0);
      attention_forward(comm, x.view(), x.view(), x.view(), seq, params, rng);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement) << needle;
      EXPECT_THAT(o.messages[static_cast<size_t>(r)], HasSubstr("rank 1 has " + needle)) << needle;
    }
  }
}

TEST(CallAgreement, RanksThatDisagreeOnTheSequenceLengthFailBeforeAnyKvMessage) {
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    // S = 37 on rank 0, 38 on rank 1: both shard lengths are 19 in zigzag, so only the
    // agreement can tell.
    const int64_t S = comm.rank() == 0 ? 37 : 38;
    const SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, S, 2, comm.rank());
    const Tensor x({1, seq.local_length(), 2, 8}, &comm.memory());
    attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {1, 0});
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("rank 0 has q seq_len=37, rank 1 has q seq_len=38"));
  }
}

// Without dropout two layers' backward calls look alike; the forward call number tells them
// apart, so ranks that run the backward of layers in different orders are caught.
TEST(CallAgreement, BackwardCallsInDifferentOrdersAreCaught) {
  Case c;
  c.params.dropout_p = 0.0f;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    const Tensor y = c.p.shard(c.p.w, 2, comm.rank(), &comm.memory());
    const ForwardResult fx =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, {});
    const ForwardResult fy =
        attention_forward(comm, y.view(), y.view(), y.view(), seq, c.params, {});
    if (comm.rank() == 0) {
      attention_backward(comm, x.view(), x.view(), x.view(), x.view(), fx, seq, c.params, {});
    } else {
      attention_backward(comm, y.view(), y.view(), y.view(), y.view(), fy, seq, c.params, {});
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("call agreement failed (call 2, backward): rank 0 has forward call "
                          "number=0, rank 1 has forward call number=1"));
  }
}

// The same tokens run twice with different dropout streams (two microbatches of one sample):
// backward for the second must not accept the first's state. This is the RngState check.
TEST(CallAgreement, StateOfAnotherForwardOnTheSameInputsIsRefused) {
  const Case c;
  const RankOutcomes o = run_all(2, [&](Communicator& comm) {
    const SequenceSharding seq = c.p.sharding(2, comm.rank());
    const Tensor x = c.p.shard(c.p.x, 2, comm.rank(), &comm.memory());
    Generator gen(9);
    const RngState first = gen.next(), second = gen.next();
    const ForwardResult f1 =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, first);
    const ForwardResult f2 =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, c.params, second);
    attention_backward(comm, x.view(), x.view(), x.view(), x.view(), f1, seq, c.params, second);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.codes[static_cast<size_t>(r)], ErrorCode::kStateMismatch);
    EXPECT_THAT(o.messages[static_cast<size_t>(r)],
                HasSubstr("ForwardResult was produced with rng={seed=9, offset=0}, backward "
                          "called with rng={seed=9, offset=1}"));
  }
}

// A ForwardStateView whose out/lse came from another dropout stream than its fingerprint (a
// recompute with other RNG) is refused.
TEST(CallAgreement, ViewWhoseOutputsCameFromAnotherRngStateIsRefused) {
  const Case c;
  const RankOutcomes o = run_all(1, [&](Communicator& comm) {
    const SequenceSharding seq = c.p.sharding(1, 0);
    const ConstView x = c.p.x.view();
    const ForwardResult f = attention_forward(comm, x, x, x, seq, c.params, {4, 4});
    ForwardStateView view = f.view();
    view.rng = {4, 5};
    attention_backward(comm, x, x, x, x, view, seq, seq, c.params, {4, 4});
  });
  EXPECT_EQ(o.codes[0], ErrorCode::kStateMismatch);
  EXPECT_THAT(o.messages[0], HasSubstr("its out/lse were computed with rng={seed=4, offset=5}"));
}

// One exchange of P fixed-size records per checked call: with P ranks, P - 1 sends per rank.
TEST(CallAgreement, CostsOneRecordExchangePerCall) {
  const Case c;
  std::mutex mu;
  std::vector<int64_t> extra;
  run_ranks(4, [&](Communicator& comm) {
    const SequenceSharding seq = c.p.sharding(4, comm.rank());
    const Tensor x = c.p.shard(c.p.x, 4, comm.rank(), &comm.memory());
    CountingCommunicator counting(comm);
    const ForwardResult f =
        attention_forward(counting, x.view(), x.view(), x.view(), seq, c.params, {1, 0});
    CpStats stats;
    CpOptions options;
    options.stats = &stats;
    const auto r = detail::ring_attention_forward(comm, x.view(), x.view(), x.view(), seq, seq,
                                                  c.params, {1, 0}, options);
    const std::lock_guard<std::mutex> lock(mu);
    extra.push_back(counting.collectives);
    EXPECT_EQ(counting.sends, stats.messages_sent) << "the k/v relay is unchanged";
  });
  for (int64_t n : extra) EXPECT_EQ(n, 1) << "one all_to_all per call";
}

}  // namespace
}  // namespace cpattn::testing
