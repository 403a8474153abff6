// Misuse of forward state must fail loudly (cpattn::Error naming what differs), never return
// numbers: a state from another layer, shape, dropout_p, rank or CP size; a recompute that
// replays another RngState or other inputs; a recompute whose output diverges; out or lse changed
// after the forward.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpattn/error.h"
#include "state/stack_harness.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "support/rank_outcomes.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs fn on `cp` ranks and returns the error run_ranks rethrows (every rank fails alike).
Error expect_error(int cp, const std::function<void(Communicator&)>& fn) {
  return testing::error_of([&] { run_ranks(cp, fn); });
}

struct Fixture {
  StackProblem p{1, 20, 2, 8, 31};
  AttentionParams params;
  Fixture() {
    params.causal = true;
    params.dropout_p = 0.1f;
  }
};

TEST(Misuse, StateFromAnotherLayer) {
  Fixture f;
  const Error e = expect_error(2, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    const Tensor x0 = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    const Tensor x1 = f.p.shard(f.p.w, 2, comm.rank(), &comm.memory());
    Generator gen(1);
    const ForwardResult layer0 =
        attention_forward(comm, x0.view(), x0.view(), x0.view(), seq, f.params, gen.next());
    const RngState layer1_rng = gen.state();
    const ForwardResult layer1 =
        attention_forward(comm, x1.view(), x1.view(), x1.view(), seq, f.params, gen.next());
    attention_backward(comm, x1.view(), x1.view(), x1.view(), x1.view(), layer0, seq, f.params,
                       layer1_rng);
  });
  EXPECT_EQ(e.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(e.what(), HasSubstr("q/k/v inputs digest"));
}

TEST(Misuse, StateOfAnotherShape) {
  Fixture f;
  const StackProblem other(1, 20, 2, 16, 4);
  const Error e = expect_error(1, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(1, 0);
    const ConstView x = f.p.x.view(), y = other.x.view();
    const ForwardResult state = attention_forward(comm, x, x, x, seq, f.params, {1, 0});
    attention_backward(comm, y, y, y, y, state, seq, f.params, {1, 0});
  });
  EXPECT_EQ(e.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(e.what(),
              HasSubstr("q shape=[1, 20, 2, 8], backward called with q shape=[1, 20, 2, 16]"));
}

TEST(Misuse, StateWithAnotherDropout) {
  Fixture f;
  const Error e = expect_error(1, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(1, 0);
    const ConstView x = f.p.x.view();
    const ForwardResult state = attention_forward(comm, x, x, x, seq, f.params, {1, 0});
    AttentionParams eval = f.params;
    eval.dropout_p = 0.0f;
    attention_backward(comm, x, x, x, x, state, seq, eval, {1, 0});
  });
  EXPECT_EQ(e.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(e.what(), HasSubstr("produced with dropout_p=0.1, backward called with dropout_p=0"));
}

TEST(Misuse, StateOfAnotherRank) {
  Fixture f;
  constexpr int kCp = 4;
  std::vector<std::optional<ForwardResult>> states(kCp);
  const Error e = expect_error(kCp, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = f.p.sharding(kCp, r);
    // Every rank holds 5 tokens, so only the rank (and data) tell the states apart.
    const Tensor x = f.p.shard(f.p.x, kCp, r, &comm.memory());
    states[static_cast<size_t>(r)] =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, {1, 0});
    comm.barrier();
    const ForwardResult& wrong = *states[static_cast<size_t>((r + 1) % kCp)];
    attention_backward(comm, x.view(), x.view(), x.view(), x.view(), wrong, seq, f.params, {1, 0});
  });
  states.clear();
  EXPECT_EQ(e.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(e.what(), HasSubstr("ForwardResult was produced for cp_rank "));
  EXPECT_THAT(e.what(), HasSubstr(" of 4, backward called on cp_rank "));
}

TEST(Misuse, StateOfAnotherCpSize) {
  Fixture f;
  f.p = StackProblem(1, 10, 2, 8, 8);
  std::optional<ForwardResult> from_cp1;
  run_ranks(1, [&](Communicator& comm) {
    const ConstView x = f.p.x.view();
    from_cp1 = attention_forward(comm, x, x, x, f.p.sharding(1, 0), f.params, {1, 0});
  });
  const Error e = expect_error(2, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    attention_backward(comm, x.view(), x.view(), x.view(), x.view(), *from_cp1, seq, f.params,
                       {1, 0});
  });
  EXPECT_EQ(e.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(e.what(), HasSubstr("produced for cp_rank 0 of 1, backward called on cp_rank"));
}

TEST(Misuse, RecomputeWithoutRestoringTheGenerator) {
  Fixture f;
  const Error e = expect_error(2, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    Generator gen(3);
    const AttentionCheckpoint ckpt = make_checkpoint(
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, gen.next()));
    // The buggy loop draws a fresh state instead of replaying {3, 0}.
    recompute_forward(comm, ckpt, gen.next(), x.view(), x.view(), x.view(), seq, f.params);
  });
  EXPECT_EQ(e.code(), ErrorCode::kRecomputeDiverged);
  EXPECT_THAT(e.what(), HasSubstr("replayed RngState {seed=3, offset=1} differs from the recorded "
                                  "{seed=3, offset=0}"));
}

TEST(Misuse, RecomputeWithOtherInputs) {
  Fixture f;
  const Error e = expect_error(2, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    Tensor changed = x.clone();
    if (changed.numel() > 0) changed.data()[0] += 1e-3f;
    const AttentionCheckpoint ckpt = make_checkpoint(
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, {3, 0}));
    recompute_forward(comm, ckpt, {3, 0}, changed.view(), x.view(), x.view(), seq, f.params);
  });
  EXPECT_EQ(e.code(), ErrorCode::kRecomputeDiverged);
  EXPECT_THAT(e.what(), HasSubstr("recompute diverged"));
  EXPECT_THAT(e.what(), HasSubstr("q/k/v inputs digest"));
}

TEST(Misuse, StrictRecomputeDetectsADivergedOutput) {
  Fixture f;
  for (const bool strict : {true, false}) {
    std::string error;
    try {
      run_ranks(1, [&](Communicator& comm) {
        const ConstView x = f.p.x.view();
        const SequenceSharding seq = f.p.sharding(1, 0);
        AttentionCheckpoint ckpt =
            make_checkpoint(attention_forward(comm, x, x, x, seq, f.params, {3, 0}));
        ckpt.fingerprint.outputs_digest ^= 1;  // as if the first forward had produced other numbers
        RecomputeOptions options;
        options.strict = strict;
        recompute_forward(comm, ckpt, {3, 0}, x, x, x, seq, f.params, options);
      });
    } catch (const Error& e) {
      error = e.what();
    }
    if (strict) {
      EXPECT_THAT(error, HasSubstr("recompute diverged: recomputed out/lse digest"));
    } else {
      EXPECT_EQ(error, "");
    }
  }
}

// out or lse changed in place after the forward (a residual added into out) would give the
// gradients of the changed values, so backward refuses such a state: on the rank that holds it
// (naming out/lse), and on the others at once, which learn of it in the call agreement. One flipped
// bit is enough, in an fp32 or a bf16 out, in lse, or in a ForwardStateView over another copy of
// out.
TEST(Misuse, OutOrLseChangedAfterTheForwardIsRefusedOnEveryRank) {
  Fixture f;
  enum class Change { kOut, kBf16Out, kLse, kViewOfAnotherOut };
  for (const Change change :
       {Change::kOut, Change::kBf16Out, Change::kLse, Change::kViewOfAnotherOut}) {
    const RankOutcomes o = run_all(2, [&](Communicator& comm) {
      const SequenceSharding seq = f.p.sharding(2, comm.rank());
      const DType dtype = change == Change::kBf16Out ? DType::kBF16 : DType::kF32;
      const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
      const Tensor xd = dense_copy(x.view(), dtype, MemoryLayout::kBSHD, &comm.memory());
      const ConstView in = xd.view();
      ForwardResult state = attention_forward(comm, in, in, in, seq, f.params, {5, 0});
      Tensor copy_of_out = state.out.clone();
      ForwardStateView view = state.view();
      if (comm.rank() == 1) {
        switch (change) {
          case Change::kOut:
          case Change::kBf16Out:
            state.out.bytes()[2] ^= std::byte{1};
            break;
          case Change::kLse:
            state.lse.bytes()[0] ^= std::byte{1};
            break;
          case Change::kViewOfAnotherOut:
            copy_of_out.bytes()[0] ^= std::byte{1};
            view.out = copy_of_out.view();
            break;
        }
      }
      if (change == Change::kViewOfAnotherOut) {
        attention_backward(comm, in, in, in, in, view, seq, seq, f.params, {5, 0});
      } else {
        attention_backward(comm, in, in, in, in, state, seq, f.params, {5, 0});
      }
    });
    const std::string what = "the ForwardResult's out or lse changed after its forward";
    EXPECT_EQ(o.codes[1], ErrorCode::kStateMismatch) << int(change);
    EXPECT_THAT(o.messages[1], HasSubstr(what)) << int(change);
    EXPECT_EQ(o.codes[0], ErrorCode::kRankDisagreement) << int(change);
    EXPECT_THAT(o.messages[0], HasSubstr("rank 1 refuses the call (state_mismatch: "
                                         "attention_backward: " +
                                         what))
        << int(change);
  }
}

// A ForwardStateView whose out is an exact fp32 copy of a bf16 forward's out is refused naming
// the dtypes (the digest is of the out the forward returned), not as an out that changed.
TEST(Misuse, AnFp32CopyOfA16BitOutIsRefusedNamingTheDtypes) {
  Fixture f;
  const Error e = expect_error(1, [&](Communicator& comm) {
    const SequenceSharding seq = f.p.sharding(1, 0);
    const Tensor x = dense_copy(f.p.x.view(), DType::kBF16, MemoryLayout::kBSHD, &comm.memory());
    const ConstView in = x.view();
    const ForwardResult state = attention_forward(comm, in, in, in, seq, f.params, {5, 0});
    const Tensor wide = dense_copy(state.out.view(), DType::kF32, MemoryLayout::kBSHD);
    ForwardStateView view = state.view();
    view.out = wide.view();
    attention_backward(comm, in, in, in, in, view, seq, seq, f.params, {5, 0});
  });
  EXPECT_EQ(e.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(e.what(), HasSubstr("its out is fp32, the forward returned it in q's dtype bf16"));
  EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("changed after its forward")));
}

// Under CP a strict check that fails on one rank fails every rank (the others name it), and
// ranks that differ in strictness fail the call agreement instead of one waiting for a message.
TEST(Misuse, StrictRecomputeFailsEveryRankWhenOneDiverges) {
  Fixture f;
  const RankOutcomes diverged = run_all(2, [&](Communicator& comm) {
    const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    AttentionCheckpoint ckpt = make_checkpoint(
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, {3, 0}));
    if (comm.rank() == 1) ckpt.fingerprint.outputs_digest ^= 1;
    RecomputeOptions options;
    options.strict = true;
    recompute_forward(comm, ckpt, {3, 0}, x.view(), x.view(), x.view(), seq, f.params, options);
  });
  EXPECT_EQ(diverged.codes[1], ErrorCode::kRecomputeDiverged);
  EXPECT_EQ(diverged.codes[0], ErrorCode::kRankDisagreement);
  EXPECT_THAT(diverged.messages[0], HasSubstr("the recomputed out/lse of rank(s) 1 differ"));

  const RankOutcomes mixed = run_all(2, [&](Communicator& comm) {
    const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    const AttentionCheckpoint ckpt = make_checkpoint(
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, {3, 0}));
    RecomputeOptions options;
    options.strict = comm.rank() == 0;
    recompute_forward(comm, ckpt, {3, 0}, x.view(), x.view(), x.view(), seq, f.params, options);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(mixed.codes[static_cast<size_t>(r)], ErrorCode::kRankDisagreement);
    EXPECT_THAT(mixed.messages[static_cast<size_t>(r)],
                HasSubstr("rank 1 has op=recompute, rank 0 has op=strict recompute"));
  }
}

// A forward made without backward in mind (CpOptions::for_backward false, as for inference)
// gives the same out and lse bits, records no inputs digest, and its state is refused by backward
// and by a recompute on every rank, naming the option.
TEST(Misuse, StateOfAForwardNotForBackward) {
  Fixture f;
  CpOptions inference;
  inference.for_backward = false;
  const auto run = [&](Communicator& comm, const std::function<void(const ForwardResult&)>& use) {
    const SequenceSharding seq = f.p.sharding(2, comm.rank());
    const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
    const ForwardResult state =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, {7, 1}, inference);
    const ForwardResult kept =
        attention_forward(comm, x.view(), x.view(), x.view(), seq, f.params, {7, 1});
    EXPECT_EQ(state.fingerprint.inputs_digest, kInputsNotDigested);
    EXPECT_NE(kept.fingerprint.inputs_digest, kInputsNotDigested);
    EXPECT_EQ(state.fingerprint.outputs_digest, kInputsNotDigested);  // out/lse not digested
    EXPECT_NE(kept.fingerprint.outputs_digest, kInputsNotDigested);
    EXPECT_TRUE(bitwise_equal(state.out.span(), kept.out.span()));
    EXPECT_TRUE(bitwise_equal(state.lse.span(), kept.lse.span()));
    use(state);
  };
  const Error backward = expect_error(2, [&](Communicator& comm) {
    run(comm, [&](const ForwardResult& state) {
      const SequenceSharding seq = f.p.sharding(2, comm.rank());
      const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
      // The backward's own options say nothing about the forward's.
      attention_backward(comm, x.view(), x.view(), x.view(), x.view(), state, seq, f.params, {7, 1},
                         inference);
    });
  });
  EXPECT_EQ(backward.code(), ErrorCode::kStateMismatch);
  EXPECT_THAT(backward.what(), HasSubstr("without a q/k/v inputs digest (its forward ran with "
                                         "CpOptions::for_backward = false"));
  EXPECT_THAT(backward.what(), HasSubstr("), backward called with q/k/v inputs digest="));
  const Error recompute = expect_error(2, [&](Communicator& comm) {
    run(comm, [&](const ForwardResult& state) {
      const SequenceSharding seq = f.p.sharding(2, comm.rank());
      const Tensor x = f.p.shard(f.p.x, 2, comm.rank(), &comm.memory());
      RecomputeOptions options;
      options.cp = inference;
      recompute_forward(comm, make_checkpoint(state), {7, 1}, x.view(), x.view(), x.view(), seq,
                        f.params, options);
    });
  });
  EXPECT_EQ(recompute.code(), ErrorCode::kRecomputeDiverged);
  EXPECT_THAT(recompute.what(), HasSubstr("CpOptions::for_backward = false"));
  // The recompute is named as the call, not a backward.
  EXPECT_THAT(recompute.what(), HasSubstr("), recompute called with q/k/v inputs digest="));
  EXPECT_THAT(recompute.what(), Not(HasSubstr("backward called")));
}

TEST(Misuse, FingerprintListsEveryDifference) {
  Fingerprint a, b;
  b.window_left = 16;
  b.causal = true;
  const auto diffs = a.differences(b);
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0],
            "ForwardResult was produced with causal=false, backward called with causal=true");
  EXPECT_EQ(diffs[1],
            "ForwardResult was produced with window_left=-1, backward called with window_left=16");
}

TEST(Generator, AdvancesOffsetByOnePerCallAndReplays) {
  Generator gen(99, 5);
  EXPECT_EQ(gen.next(), (RngState{99, 5}));
  EXPECT_EQ(gen.next(), (RngState{99, 6}));
  const RngState saved = gen.state();
  gen.next();
  gen.set_state(saved);
  EXPECT_EQ(gen.next(), (RngState{99, 7}));
}

}  // namespace
}  // namespace cpattn::testing
