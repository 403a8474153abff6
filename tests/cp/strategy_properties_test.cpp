// Strategy properties beyond parity: dropout masks bit-identical to cp = 1 and to the contract,
// bitwise determinism, the message counts and bytes of docs/strategies.md, failure without hangs
// (a failed rank releases the other rows and columns of a hybrid grid), argument errors before
// any message, and per-rank memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/cp_options.h"
#include "cpattn/detail/cp.h"
#include "cpattn/error.h"
#include "support/counting_communicator.h"
#include "support/errors.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::MaskKind;

const std::vector<std::pair<Strategy, int>> kStrategies = {
    {Strategy::ring(), 4},       {Strategy::allgather(), 4},  {Strategy::ulysses(), 4},
    {Strategy::hybrid(2, 2), 4}, {Strategy::hybrid(4, 2), 8}, {Strategy::hybrid(2, 4), 8}};

RingRun run_of(const Strategy& strategy, int P, Layout layout, bool backward = true) {
  RingRun run{P, layout, MemoryLayout::kBSHD, 1, backward};
  run.strategy = strategy;
  return run;
}

// q = k = 0 makes every visible score 0; v_j = e_j (Dv = S) makes out_i[j] = keep_ij / (1 - p)
// P_ij, nonzero exactly when j is visible to i and kept: the output spells out the dropout mask,
// for every query head (the global head index of the contract, whichever rank computes it). Also
// with sinks, softcap and ALiBi (they change P_ij, never which elements are kept) under a
// prefix-LM mask of slices (masked elements stay 0).
TEST(StrategyDropout, MasksAreTheBitsOfCp1AndTheContract) {
  const int64_t S = 29, Hq = 8;
  reference::Problem plain;
  plain.dims = {1, S, S, Hq, 2, 4, S};
  plain.params.dropout_p = 0.25f;
  plain.rng = {0x0123456789ABCDEFull, (5ull << 32) | 3};
  for (int64_t i = 0; i < S; ++i) plain.q_pos.push_back(i), plain.k_pos.push_back(i);
  plain.q.assign(static_cast<size_t>(S * Hq * 4), 0.0);
  plain.k.assign(static_cast<size_t>(S * 2 * 4), 0.0);
  plain.v.assign(static_cast<size_t>(S * 2 * S), 0.0);
  for (int64_t j = 0; j < S; ++j)
    for (int64_t h = 0; h < 2; ++h) plain.v[static_cast<size_t>((j * 2 + h) * S + j)] = 1.0;
  reference::Problem featured = plain;
  featured.params.sink.assign(static_cast<size_t>(Hq), 1.5f);
  featured.params.softcap = 2.0f;
  featured.params.alibi_slopes.assign(static_cast<size_t>(Hq), 0.0625f);
  featured.params.slices = reference::make_slices(MaskKind::kPrefixLmSlices, S, 1);
  for (const reference::Problem* p : {&plain, &featured}) {
    const bool sliced = !p->params.slices.empty();
    const reference::Outputs one =
        run_ring(*p, run_of(Strategy::ring(), 1, Layout::kZigzag, false));
    for (const auto& [strategy, P] : kStrategies) {
      for (const Layout layout : {Layout::kZigzag, Layout::kStriped}) {
        const reference::Outputs many = run_ring(*p, run_of(strategy, P, layout, false));
        int64_t dropped = 0, masked = 0;
        for (int64_t i = 0; i < S; ++i) {
          for (int64_t h = 0; h < Hq; ++h) {
            for (int64_t j = 0; j < S; ++j) {
              const size_t at = static_cast<size_t>((i * Hq + h) * S + j);
              const bool keep1 = one.out[at] != 0.0, keep = many.out[at] != 0.0;
              const bool visible = reference::visible(p->params, i, j, 0, 0);
              const bool want = visible && dropout_keep(dropout_bits(p->rng, 0, h, Hq, i, j),
                                                        p->params.dropout_p);
              ASSERT_EQ(keep, keep1)
                  << strategy_name(strategy) << " " << layout_name(layout) << " i " << i << " h "
                  << h << " j " << j << (sliced ? " (sinks, softcap, ALiBi, slices)" : "");
              ASSERT_EQ(keep1, want) << "i " << i << " h " << h << " j " << j;
              dropped += visible && !keep1 ? 1 : 0;
              masked += visible ? 0 : 1;
            }
          }
        }
        EXPECT_GT(dropped, 0);  // the test would be vacuous without dropped elements
        EXPECT_EQ(masked > 0, sliced);
      }
    }
  }
}

reference::Problem problem(MaskKind mask, int64_t S, int64_t hq, int64_t hkv, float dropout,
                           uint64_t seed) {
  reference::CaseSpec s;
  s.mask = mask;
  s.dims = {1, S, S, hq, hkv, 16, 8};
  s.dropout_p = dropout;
  s.seed = seed;
  return reference::make_problem(s);
}

TEST(StrategyDeterminism, TwoRunsAreBitwiseEqual) {
  const reference::Problem p = problem(MaskKind::kDocsCausal, 203, 8, 2, 0.1f, 71);
  for (const auto& [strategy, P] : kStrategies) {
    const RingRun run = run_of(strategy, P, Layout::kZigzag);
    EXPECT_TRUE(testing::outputs_bitwise_equal(run_ring(p, run), run_ring(p, run)))
        << strategy_name(strategy);
  }
}

// Ulysses runs the single-rank kernel on whole sequences in global token order, with the global
// heads' dropout: with kv heads sharded (Hkv % P == 0) every tensor is bitwise the kernel's; with
// replicated kv heads only dk/dv differ (their per-rank partial sums are added in rank order).
TEST(StrategyUlysses, BitwiseTheSingleRankKernelWhenKvHeadsShard) {
  for (const auto& [P, hkv] : std::vector<std::pair<int, int64_t>>{{4, 8}, {2, 2}, {4, 2}}) {
    const reference::Problem p = problem(MaskKind::kDocsCausal, 157, 8, hkv, 0.1f, 75);
    const reference::Outputs kernel = reference::run_kernel(p, {MemoryLayout::kBSHD, 1, true});
    for (const Layout layout : {Layout::kZigzag, Layout::kStriped}) {
      SCOPED_TRACE(::testing::Message()
                   << "P " << P << " Hkv " << hkv << " " << layout_name(layout));
      reference::Outputs got = run_ring(p, run_of(Strategy::ulysses(), P, layout));
      if (hkv % P != 0) {
        got.dk = kernel.dk;  // summed over the ranks that share a kv head
        got.dv = kernel.dv;
      }
      EXPECT_TRUE(testing::outputs_bitwise_equal(got, kernel));
    }
  }
}

// docs/strategies.md, "Messages": sends per rank of a forward and of a backward, and the bytes
// of the forward for S divisible by P (full mask: nothing is pruned).
TEST(StrategyTraffic, MessagesAndBytesPerRankMatchDocs) {
  const int64_t S = 96, Hq = 8, Hkv = 2, Dqk = 16, Dv = 8;
  const reference::Problem p = problem(MaskKind::kNone, S, Hq, Hkv, 0.0f, 73);
  for (const auto& [strategy, P] : kStrategies) {
    SCOPED_TRACE(strategy_name(strategy));
    std::vector<CpStats> fwd(static_cast<size_t>(P)), both(static_cast<size_t>(P));
    RingRun run = run_of(strategy, P, Layout::kContiguous, false);
    run.stats = fwd;
    run_ring(p, run);
    run.backward = true;
    run.stats = both;
    run_ring(p, run);
    const int U = strategy.kind == Strategy::Kind::kHybrid ? strategy.ulysses_size : 1;
    const int R = strategy.kind == Strategy::Kind::kHybrid ? strategy.ring_size : P;
    int64_t sends_fwd = 0, sends_bwd = 0, bytes_fwd = 0;
    const int64_t sr = S / P;
    switch (strategy.kind) {
      case Strategy::Kind::kRing:
        sends_fwd = P - 1;
        sends_bwd = 2 * P - 1;
        bytes_fwd = (P - 1) * sr * Hkv * (Dqk + Dv) * 4;
        break;
      case Strategy::Kind::kAllGather:
        sends_fwd = P - 1;
        sends_bwd = 2 * (P - 1);
        bytes_fwd = (P - 1) * sr * Hkv * (Dqk + Dv) * 4;
        break;
      case Strategy::Kind::kUlysses: {
        sends_fwd = sends_bwd = 2 * (P - 1);
        // In: q heads Hq/P, kv heads max(Hkv/P, 1) of the own tokens to every other rank;
        // out: out (Dv) and lse (1) of their tokens for the own Hq/P heads back.
        const int64_t kv_heads = Hkv % P == 0 ? Hkv / P : 1;
        bytes_fwd = (P - 1) * sr * ((Hq / P) * Dqk + kv_heads * (Dqk + Dv)) * 4 +
                    (P - 1) * sr * (Hq / P) * (Dv + 1) * 4;
        break;
      }
      case Strategy::Kind::kHybrid: {
        sends_fwd = 2 * (U - 1) + (R - 1);
        sends_bwd = 2 * (U - 1) + (R - 1) + R;
        const int64_t kv_heads = Hkv % U == 0 ? Hkv / U : 1;
        const int64_t row = S / R;  // tokens of a row
        bytes_fwd = (U - 1) * sr * ((Hq / U) * Dqk + kv_heads * (Dqk + Dv)) * 4 +
                    (U - 1) * sr * (Hq / U) * (Dv + 1) * 4 +
                    (R - 1) * row * kv_heads * (Dqk + Dv) * 4;
        break;
      }
    }
    for (int r = 0; r < P; ++r) {
      const CpStats& f = fwd[static_cast<size_t>(r)];
      const CpStats& b = both[static_cast<size_t>(r)];
      EXPECT_EQ(f.messages_sent, sends_fwd) << "forward, rank " << r;
      EXPECT_EQ(b.messages_sent - f.messages_sent, sends_bwd) << "backward, rank " << r;
      EXPECT_EQ(f.bytes_sent, bytes_fwd) << "forward bytes, rank " << r;
      EXPECT_GT(f.kernel_seconds, 0.0);
    }
  }
}

// A rank of a hybrid 2 x 2 grid that fails between forward and backward: the other ranks,
// blocked in the backward's row all-to-all and column ring (or still finishing their forward),
// are released promptly, each with kPeerFailed.
TEST(StrategyFailure, OneRankFailingReleasesTheWholeGrid) {
  const reference::Problem p = problem(MaskKind::kCausal, 64, 4, 2, 0.0f, 79);
  const reference::ProblemTensors whole(p);
  std::vector<ErrorCode> codes(4, ErrorCode::kInternal);
  const auto start = std::chrono::steady_clock::now();
  const Error e = error_of([&] {
    run_ranks(4, [&](Communicator& comm) {
      const int r = comm.rank();
      const SequenceSharding s = SequenceSharding::of(Layout::kZigzag, 64, 4, r);
      MemoryCounter* mem = &comm.memory();
      const Tensor q = shard_tensor(whole.q.view(), s, r, mem);
      const Tensor k = shard_tensor(whole.k.view(), s, r, mem);
      const Tensor v = shard_tensor(whole.v.view(), s, r, mem);
      CpOptions options;
      options.strategy = Strategy::hybrid(2, 2);
      try {
        // A slower rank may still be in its forward when rank 3 fails: the forward's
        // cancellation checks (Communicator::throw_if_group_failed) release it there.
        const detail::CpForwardResult f = detail::cp_attention_forward(
            comm, q.view(), k.view(), v.view(), s, s, p.params, p.rng, options);
        if (r == 3) throw Error(ErrorCode::kInternal, "rank 3 gives up before its backward");
        detail::cp_attention_backward(comm, f.out.view(), q.view(), k.view(), v.view(),
                                      f.out.view(), f.lse.span(), s, s, p.params, f.rng, options);
      } catch (const Error& err) {
        codes[static_cast<size_t>(r)] = err.code();
        throw;
      }
    });
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_NE(std::string(e.what()).find("gives up"), std::string::npos) << e.what();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], ErrorCode::kPeerFailed);
}

// A strategy that cannot run the call fails on every rank before any message, naming the rule.
TEST(StrategyArguments, ImpossibleStrategiesAreRejectedBeforeAnyMessage) {
  struct Bad {
    Strategy strategy;
    int64_t hq, hkv;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {Strategy::hybrid(3, 2), 4, 2, "U x R must cover the group of 4 ranks"},
      {Strategy::ulysses(), 6, 2, "Hq must be a multiple of 4, got Hq = 6"},
      {Strategy::ulysses(), 12, 3, "got Hkv = 3"},
      {Strategy::hybrid(4, 1), 4, 1, ""},  // valid: replicated kv head
      {Strategy{Strategy::Kind::kUlysses, 2, 2}, 4, 2, "for hybrid only"},
  };
  for (const Bad& b : bad) {
    std::atomic<int> errors{0};
    run_ranks(4, [&](Communicator& comm) {
      const SequenceSharding s = SequenceSharding::of(Layout::kZigzag, 16, 4, comm.rank());
      const Tensor q({1, 4, b.hq, 8}), k({1, 4, b.hkv, 8});
      CpOptions options;
      options.strategy = b.strategy;
      CountingCommunicator counting(comm);
      try {
        detail::cp_attention_forward(counting, q.view(), k.view(), k.view(), s, s, {}, {}, options);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
        EXPECT_EQ(counting.sends + counting.recvs + counting.collectives, 0);
        ++errors;
      }
    });
    EXPECT_EQ(errors.load(), std::string(b.says).empty() ? 0 : 4) << strategy_name(b.strategy);
  }
  EXPECT_EQ(parse_strategy("hybrid:2x4"), Strategy::hybrid(2, 4));
  EXPECT_EQ(strategy_name(parse_strategy("allgather")), "allgather");
  for (const char* name : {"hybrid:0x4", "hybrid:2x", "hybrid:2*2", "rings", ""}) {
    EXPECT_EQ(error_of([&] { parse_strategy(name); }).code(), ErrorCode::kInvalidArgument) << name;
  }
}

// Per-rank peak memory at fixed S: O(S/P) for the ring, ulysses and the hybrid (doubling P about
// halves it); allgather holds the whole k/v (and its gradients in backward) on every rank.
TEST(StrategyMemory, PeakBytesPerRank) {
  const reference::Problem p = problem(MaskKind::kCausal, 1024, 8, 8, 0.0f, 83);
  const auto peak = [&](const Strategy& strategy, int P) {
    std::atomic<int64_t> worst{0};
    run_ring(p, run_of(strategy, P, Layout::kZigzag),
             [&](Communicator& comm, const std::function<void(Communicator&)>& body) {
               body(comm);
               int64_t now = worst.load();
               const int64_t mine = comm.memory().stats().peak_bytes;
               while (mine > now && !worst.compare_exchange_weak(now, mine)) {
               }
             });
    return static_cast<double>(worst.load());
  };
  EXPECT_LT(peak(Strategy::ulysses(), 4), 0.6 * peak(Strategy::ulysses(), 2));
  EXPECT_LT(peak(Strategy::ulysses(), 8), 0.6 * peak(Strategy::ulysses(), 4));
  EXPECT_LT(peak(Strategy::hybrid(2, 4), 8), 0.6 * peak(Strategy::hybrid(2, 2), 4));
  EXPECT_GT(peak(Strategy::allgather(), 8), 0.8 * peak(Strategy::allgather(), 4));
}

}  // namespace
}  // namespace cpattn::testing
