// Adversarial probes of the state lifecycle: results that outlive their communicator, moved-from
// results, malformed views reaching the fingerprint, one rank misusing its state, recompute with
// other params, and the memory counters after every kind of failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "state/stack_harness.h"
#include "support/errors.h"

namespace cpattn::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Scenario {
  StackProblem p{1, 23, 2, 8, 17};
  AttentionParams params;
  Scenario() {
    params.causal = true;
    params.dropout_p = 0.1f;
  }
};

using testing::error_of;

// Results kept after run_ranks returned (the natural way to inspect them) outlive the ranks'
// communicators and their MemoryCounters; freeing them later must be safe (it was a
// use-after-free of the destroyed counter) and the process totals must return to the baseline.
TEST(StateAdversarial, ResultsOutliveTheirCommunicator) {
  Scenario s;
  const StateMemoryStats before = memory_stats();
  {
    std::vector<std::optional<ForwardResult>> kept(3);
    std::vector<std::optional<AttentionGradients>> grads(3);
    run_ranks(3, [&](Communicator& comm) {
      const int r = comm.rank();
      const SequenceSharding seq = s.p.sharding(3, r);
      const Tensor x = s.p.shard(s.p.x, 3, r, &comm.memory());
      ForwardResult f =
          attention_forward(comm, x.view(), x.view(), x.view(), seq, s.params, {5, 0});
      grads[static_cast<size_t>(r)] = attention_backward(comm, x.view(), x.view(), x.view(),
                                                         x.view(), f, seq, s.params, {5, 0});
      kept[static_cast<size_t>(r)] = std::move(f);
    });
    EXPECT_EQ(memory_stats().live_forward_results, before.live_forward_results + 3);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(kept[static_cast<size_t>(r)]->out.shape()[1], s.p.sharding(3, r).local_length());
    }
    // Moving a kept result around after its rank ended is fine as well.
    ForwardResult moved = std::move(*kept[0]);
    kept[0].reset();
  }
  EXPECT_EQ(memory_stats().live_forward_results, before.live_forward_results);
  EXPECT_EQ(memory_stats().live_bytes, before.live_bytes);
}

// Backward with a moved-from ForwardResult fails with kStateMismatch saying so, on that rank, and
// the other rank learns why in the call agreement (kRankDisagreement quoting it).
TEST(StateAdversarial, MovedFromResultIsRejected) {
  Scenario s;
  std::vector<ErrorCode> codes(2, ErrorCode::kInternal);
  const Error e = error_of([&] {
    run_ranks(2, [&](Communicator& comm) {
      const int r = comm.rank();
      const SequenceSharding seq = s.p.sharding(2, r);
      const Tensor x = s.p.shard(s.p.x, 2, r, &comm.memory());
      // The try covers the forward too: once rank 0 fails, rank 1 may be stopped at an
      // interruption point of its forward's last kernel call.
      try {
        ForwardResult f =
            attention_forward(comm, x.view(), x.view(), x.view(), seq, s.params, {1, 0});
        ForwardResult thief = std::move(f);
        attention_backward(comm, x.view(), x.view(), x.view(), x.view(), r == 0 ? f : thief, seq,
                           s.params, {1, 0});
      } catch (const Error& err) {
        codes[static_cast<size_t>(r)] = err.code();
        throw;
      }
    });
  });
  // run_ranks rethrows whichever rank failed first: either way the reason is quoted.
  EXPECT_THAT(e.what(), HasSubstr("moved from"));
  EXPECT_EQ(codes[0], ErrorCode::kStateMismatch);
  EXPECT_EQ(codes[1], ErrorCode::kRankDisagreement);
}

// Views that cannot be read (null data, negative strides or dims) reach make_fingerprint before
// any ring validation in backward and recompute: they must throw, not be dereferenced.
TEST(StateAdversarial, MalformedViewsThrowBeforeBeingHashed) {
  Scenario s;
  run_ranks(1, [&](Communicator& comm) {
    const SequenceSharding seq = s.p.sharding(1, 0);
    const ConstView x = s.p.x.view();
    const ForwardResult f = attention_forward(comm, x, x, x, seq, s.params, {1, 0});
    const AttentionCheckpoint ckpt = make_checkpoint(f);
    ConstView null_q = x;
    null_q.data = nullptr;
    ConstView negative = x;
    negative.stride[1] = -negative.stride[1];
    ConstView negative_dim = x;
    negative_dim.shape[0] = -1;
    for (const ConstView& bad : {null_q, negative, negative_dim}) {
      const Error b =
          error_of([&] { attention_backward(comm, x, bad, x, x, f, seq, s.params, f.rng); });
      EXPECT_NE(b.code(), ErrorCode::kInternal) << b.what();
      EXPECT_THAT(b.what(), StartsWith("q ")) << b.what();
      const Error r =
          error_of([&] { recompute_forward(comm, ckpt, f.rng, x, x, bad, seq, s.params); });
      EXPECT_THAT(r.what(), StartsWith("v ")) << r.what();
      const Error m =
          error_of([&] { make_fingerprint(0, 1, x, bad, x, seq, seq, s.params, f.rng); });
      EXPECT_THAT(m.what(), StartsWith("k ")) << m.what();
    }
  });
}

// One rank calls backward with another layer's state while the other ranks call it correctly:
// that rank reports kStateMismatch, the others learn of it in the call agreement and throw
// kRankDisagreement at once (no hang), and nothing stays allocated.
TEST(StateAdversarial, OneRankWithAMismatchedState) {
  Scenario s;
  const StateMemoryStats before = memory_stats();
  std::vector<ErrorCode> codes(4, ErrorCode::kInternal);
  std::vector<std::string> messages(4);
  const Error e = error_of([&] {
    run_ranks(4, [&](Communicator& comm) {
      const int r = comm.rank();
      // The try covers the forwards too: rank 2 may fail while a peer still completes its last
      // forward transfer, and that peer is then released inside attention_forward.
      try {
        const SequenceSharding seq = s.p.sharding(4, r);
        const Tensor x = s.p.shard(s.p.x, 4, r, &comm.memory());
        const Tensor y = s.p.shard(s.p.w, 4, r, &comm.memory());
        Generator gen(3);
        const RngState rx = gen.next(), ry = gen.next();
        const ForwardResult fx =
            attention_forward(comm, x.view(), x.view(), x.view(), seq, s.params, rx);
        const ForwardResult fy =
            attention_forward(comm, y.view(), y.view(), y.view(), seq, s.params, ry);
        attention_backward(comm, y.view(), y.view(), y.view(), y.view(), r == 2 ? fx : fy, seq,
                           s.params, ry);
      } catch (const Error& err) {
        codes[static_cast<size_t>(r)] = err.code();
        messages[static_cast<size_t>(r)] = err.what();
        throw;
      }
    });
  });
  // Rank 2 throws its own state mismatch; the others learn of it in the call agreement and throw
  // at once, naming rank 2 (whichever rank failed first is the one run_ranks rethrows).
  EXPECT_TRUE(e.code() == ErrorCode::kStateMismatch || e.code() == ErrorCode::kRankDisagreement)
      << e.what();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(codes[static_cast<size_t>(r)],
              r == 2 ? ErrorCode::kStateMismatch : ErrorCode::kRankDisagreement)
        << "rank " << r;
  }
  EXPECT_THAT(messages[0], HasSubstr("rank 2 has")) << messages[0];
  EXPECT_EQ(memory_stats().live_bytes, before.live_bytes);
  EXPECT_EQ(memory_stats().live_forward_results, before.live_forward_results);
}

// Recompute with params that differ from the first forward is refused, naming the field.
TEST(StateAdversarial, RecomputeWithOtherParams) {
  Scenario s;
  run_ranks(2, [&](Communicator& comm) {
    const SequenceSharding seq = s.p.sharding(2, comm.rank());
    const Tensor x = s.p.shard(s.p.x, 2, comm.rank(), &comm.memory());
    const ConstView v = x.view();
    AttentionCheckpoint ckpt;
    {
      const ForwardResult f = attention_forward(comm, v, v, v, seq, s.params, {9, 4});
      ckpt = make_checkpoint(f);
    }
    AttentionParams other = s.params;
    other.window_left = 3;
    const Error e = error_of([&] { recompute_forward(comm, ckpt, {9, 4}, v, v, v, seq, other); });
    EXPECT_EQ(e.code(), ErrorCode::kRecomputeDiverged);
    EXPECT_THAT(e.what(), HasSubstr("window_left"));
    other = s.params;
    other.softmax_scale = 0.25f;
    EXPECT_THROW(recompute_backward(comm, ckpt, {9, 4}, v, v, v, v, seq, other), Error);
    // The right params still work after the refusals (the refusals posted no message).
    const AttentionGradients g = recompute_backward(comm, ckpt, {9, 4}, v, v, v, v, seq, s.params);
    EXPECT_EQ(g.dq.shape(), x.shape());
  });
}

// Ranks that hold no tokens (S < P) still take part in forward, backward and recompute.
TEST(StateAdversarial, RanksWithoutTokens) {
  StackProblem p(1, 3, 2, 4, 5);
  AttentionParams params;
  params.causal = true;
  run_ranks(5, [&](Communicator& comm) {
    const SequenceSharding seq = p.sharding(5, comm.rank());
    const Tensor x = p.shard(p.x, 5, comm.rank(), &comm.memory());
    const ConstView v = x.view();
    const ForwardResult f = attention_forward(comm, v, v, v, seq, params, {1, 1});
    const AttentionCheckpoint ckpt = make_checkpoint(f);
    const AttentionGradients g = attention_backward(comm, v, v, v, v, f, seq, params, {1, 1});
    const AttentionGradients again =
        recompute_backward(comm, ckpt, {1, 1}, v, v, v, v, seq, params);
    EXPECT_EQ(g.dq.shape()[1], seq.local_length());
    for (int64_t i = 0; i < g.dq.numel(); ++i) EXPECT_EQ(g.dq.data()[i], again.dq.data()[i]);
  });
}

}  // namespace
}  // namespace cpattn::testing
