// The ring with bf16 and fp16 tensors (docs/design.md section 1.1): k/v travel in the input dtype,
// dk/dv accumulators and the carried out in fp32, results rounded once. Checked against the
// double reference by the kernel's rule on every ISA path, cp = 4 against cp = 1, the dropout mask
// of cp = 4 against cp = 1 and the contract, determinism, recompute bitwise equal to the first
// forward and backward, and the strategies that refuse 16-bit tensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "cp/ring_harness.h"
#include "cpattn/attention.h"
#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "cpattn/recompute.h"
#include "support/metrics.h"
#include "verify/reference_case.h"

namespace cpattn::testing {
namespace {

using reference::CaseSpec;
using reference::MaskKind;

struct DtypeRingCase {
  int cp_size;
  Layout layout;
  CaseSpec spec;
};

std::string name_of(const DtypeRingCase& c) {
  return reference::case_name(c.spec) + "_" + layout_name(c.layout) + "_cp" +
         std::to_string(c.cp_size);
}

CaseSpec spec(MaskKind mask, int64_t S, int64_t hq, int64_t hkv, int64_t dqk, int64_t dv,
              float dropout, MemoryLayout layout, uint64_t seed, DType dtype) {
  CaseSpec s;
  s.mask = mask;
  s.dims = {1, S, S, hq, hkv, dqk, dv};
  s.dropout_p = dropout;
  s.layout = layout;
  s.seed = seed;
  s.dtype = dtype;
  return s;
}

std::vector<DtypeRingCase> cases() {
  std::vector<DtypeRingCase> c;
  for (DType d : {DType::kBF16, DType::kF16}) {
    c.push_back({4, Layout::kZigzag,
                 spec(MaskKind::kCausal, 301, 4, 2, 32, 16, 0.1f, MemoryLayout::kBSHD, 51, d)});
    c.push_back({2, Layout::kStriped,
                 spec(MaskKind::kDocs, 97, 2, 2, 16, 16, 0.0f, MemoryLayout::kBHSD, 52, d)});
    c.push_back(
        {3, Layout::kContiguous,
         spec(MaskKind::kCausalWindow, 97, 2, 1, 24, 24, 0.1f, MemoryLayout::kSBHD, 53, d)});
    c.push_back({4, Layout::kZigzag,
                 spec(MaskKind::kNone, 7, 1, 1, 8, 8, 0.0f, MemoryLayout::kBSHD, 54, d)});
    c.push_back({1, Layout::kZigzag,
                 spec(MaskKind::kCausal, 97, 2, 1, 16, 16, 0.1f, MemoryLayout::kBSHD, 55, d)});
    // Sinks, softcap, ALiBi and mask slices (docs/design.md section 1).
    CaseSpec slices =
        spec(MaskKind::kDocSlices, 97, 4, 2, 16, 16, 0.1f, MemoryLayout::kBSHD, 56, d);
    slices.sink = true;
    slices.softcap = 5.0f;
    slices.alibi = true;
    c.push_back({4, Layout::kZigzag, slices});
    CaseSpec prefix_lm =
        spec(MaskKind::kPrefixLmSlices, 97, 2, 1, 16, 8, 0.1f, MemoryLayout::kBSHD, 57, d);
    prefix_lm.sink = true;
    c.push_back({3, Layout::kStriped, prefix_lm});
  }
  return c;
}

reference::RingRun run_of(const DtypeRingCase& c, int cp_size) {
  reference::RingRun run{cp_size, c.layout, c.spec.layout};
  run.dtype = c.spec.dtype;
  return run;
}

class RingDtype : public ::testing::TestWithParam<DtypeRingCase> {};

TEST_P(RingDtype, MatchesDoubleReferenceOnEveryIsa) {
  const DtypeRingCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  const reference::Oracle oracle = reference::make_oracle(p, true, c.spec.dtype);
  for (Isa isa : available_isas()) {
    reference::RingRun run = run_of(c, c.cp_size);
    run.isa = isa;
    EXPECT_TRUE(row_passes(
        reference::compare(name_of(c) + " isa " + isa_name(isa), oracle, run_ring(p, run))));
  }
}

// cp = P against cp = 1 in the same dtype: the split adds no rounding a user could see (the
// accumulators are fp32 and the results are rounded once), so the error stays within 2x.
TEST_P(RingDtype, ErrorAtMostTwiceCp1AndRunsAreBitwiseEqual) {
  const DtypeRingCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  const reference::Outputs exact = reference::attention(p);
  const reference::Outputs one = run_ring(p, run_of(c, 1));
  const reference::Outputs many = run_ring(p, run_of(c, c.cp_size));
  EXPECT_TRUE(outputs_bitwise_equal(many, run_ring(p, run_of(c, c.cp_size))));
  const std::array<const std::vector<double>*, 5> e = {&exact.out, &exact.lse, &exact.dq, &exact.dk,
                                                       &exact.dv};
  const std::array<const std::vector<double>*, 5> a = {&one.out, &one.lse, &one.dq, &one.dk,
                                                       &one.dv};
  const std::array<const std::vector<double>*, 5> b = {&many.out, &many.lse, &many.dq, &many.dk,
                                                       &many.dv};
  for (size_t t = 0; t < 5; ++t) {
    const double err1 = reference::max_abs_error(*e[t], *a[t]);
    const double errp = reference::max_abs_error(*e[t], *b[t]);
    EXPECT_LE(errp, 2.0 * err1 + 1e-6) << reference::kTensorNames[t] << ": cp1 err " << err1
                                       << ", cp" << c.cp_size << " err " << errp;
  }
}

// One rank: the ring's 16-bit dq is the kernel's own, rounded once by the kernel (no fp32
// accumulator in between), bitwise; with 2 threads and an odd B * Hkv (the Hkv = 1 cases) the
// kernel splits k tiles into chunks whose partial dq rows it sums before that rounding.
TEST_P(RingDtype, OneRankGivesTheKernelsOwnResultsBitwise) {
  const DtypeRingCase& c = GetParam();
  const reference::Problem p = reference::make_problem(c.spec);
  for (int threads : {1, 2}) {
    reference::RingRun ring = run_of(c, 1);
    ring.num_threads = threads;
    reference::KernelRun kernel{c.spec.layout, threads, true, Isa::kAuto, c.spec.dtype};
    const reference::Outputs a = run_ring(p, ring), b = reference::run_kernel(p, kernel);
    EXPECT_EQ(a.dq, b.dq) << threads << " threads";
    EXPECT_EQ(a.dk, b.dk) << threads << " threads";
    EXPECT_EQ(a.dv, b.dv) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RingDtype, ::testing::ValuesIn(cases()),
                         [](const auto& tp) { return name_of(tp.param); });

// With q = k = 0 every visible score is 0 and p_ij = 1/S; v_j = e_j (Dv = S) makes out_i[j] =
// keep_ij / (1 - p) / S (non-zero in bf16 and fp16 too), so the output spells out the mask.
TEST(RingDtypeDropout, Cp4UsesTheSameMaskBitsAsCp1AndTheContract) {
  const int64_t S = 37, Hq = 2;
  reference::Problem p;
  p.dims = {1, S, S, Hq, 1, 4, S};
  p.params.dropout_p = 0.25f;
  p.rng = {0x1234567890ABCDEFull, (3ull << 32) | 11};
  for (int64_t i = 0; i < S; ++i) p.q_pos.push_back(i), p.k_pos.push_back(i);
  p.q.assign(static_cast<size_t>(S * Hq * 4), 0.0);
  p.k.assign(static_cast<size_t>(S * 4), 0.0);
  p.v.assign(static_cast<size_t>(S * S), 0.0);
  for (int64_t j = 0; j < S; ++j) p.v[static_cast<size_t>(j * S + j)] = 1.0;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    reference::RingRun one_run{1, Layout::kZigzag, MemoryLayout::kBSHD, 1, false};
    one_run.dtype = dtype;
    const reference::Outputs one = run_ring(p, one_run);
    reference::RingRun four_run{4, Layout::kZigzag, MemoryLayout::kBSHD, 1, false};
    four_run.dtype = dtype;
    const reference::Outputs four = run_ring(p, four_run);
    int64_t dropped = 0;
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t h = 0; h < Hq; ++h) {
        for (int64_t j = 0; j < S; ++j) {
          const size_t at = static_cast<size_t>((i * Hq + h) * S + j);
          const bool keep1 = one.out[at] != 0.0, keep4 = four.out[at] != 0.0;
          const bool want = reference::dropout_keep(p.rng, 0, h, Hq, i, j, p.params.dropout_p);
          ASSERT_EQ(keep4, keep1) << dtype_name(dtype) << " i " << i << " h " << h << " j " << j;
          ASSERT_EQ(keep1, want) << dtype_name(dtype) << " i " << i << " h " << h << " j " << j;
          ASSERT_EQ(four.out[at], one.out[at]);  // one rounding of the same value
          dropped += keep1 ? 0 : 1;
        }
      }
    }
    EXPECT_GT(dropped, 0);  // the test would be vacuous without dropped elements
  }
}

// The safe API in bf16 on 4 ranks: a recomputed forward (strict: its out digest is compared) and
// its backward are bitwise equal to the first forward and backward; the results are bf16.
TEST(RingDtypeRecompute, RecomputeIsBitwiseEqualInBf16) {
  CaseSpec s =
      spec(MaskKind::kCausal, 97, 4, 2, 16, 16, 0.1f, MemoryLayout::kBSHD, 61, DType::kBF16);
  const reference::Problem p = reference::make_problem(s);
  const reference::ProblemTensors whole(p);
  const int P = 4;
  run_ranks(P, [&](Communicator& comm) {
    const int r = comm.rank();
    const auto local = [&](const Tensor& t) {
      return dense_copy(
          shard_tensor(t.view(), SequenceSharding::of(Layout::kZigzag, p.dims.Sq, P, r), r).view(),
          DType::kBF16, MemoryLayout::kBSHD);
    };
    const Tensor q = local(whole.q), k = local(whole.k), v = local(whole.v),
                 dout = local(whole.dout);
    const SequenceSharding seq = SequenceSharding::of(Layout::kZigzag, p.dims.Sq, P, r);
    const ForwardResult first =
        attention_forward(comm, q.view(), k.view(), v.view(), seq, p.params, p.rng);
    EXPECT_EQ(first.out.dtype(), DType::kBF16);
    const AttentionGradients g1 = attention_backward(comm, dout.view(), q.view(), k.view(),
                                                     v.view(), first, seq, p.params, p.rng);
    EXPECT_EQ(g1.dk.dtype(), DType::kBF16);
    const AttentionCheckpoint ckpt = make_checkpoint(first);
    RecomputeOptions strict;
    strict.strict = true;
    const ForwardResult again =
        recompute_forward(comm, ckpt, p.rng, q.view(), k.view(), v.view(), seq, p.params, strict);
    EXPECT_TRUE(
        std::equal(first.out.bytes().begin(), first.out.bytes().end(), again.out.bytes().begin()));
    const AttentionGradients g2 = recompute_backward(comm, ckpt, p.rng, dout.view(), q.view(),
                                                     k.view(), v.view(), seq, p.params, strict);
    for (const auto& [a, b] :
         {std::pair{&g1.dq, &g2.dq}, std::pair{&g1.dk, &g2.dk}, std::pair{&g1.dv, &g2.dv}}) {
      EXPECT_TRUE(std::equal(a->bytes().begin(), a->bytes().end(), b->bytes().begin()));
    }
  });
}

// k/v travel in the input dtype (half the bytes of fp32), the dk/dv accumulators in fp32.
TEST(RingDtypeTraffic, KvBlocksTravelIn16BitsAndDkDvAccumulatorsInFp32) {
  const CaseSpec s32 =
      spec(MaskKind::kNone, 64, 2, 2, 16, 16, 0.0f, MemoryLayout::kBSHD, 71, DType::kF32);
  CaseSpec s16 = s32;
  s16.dtype = DType::kBF16;
  const int P = 4;
  const auto bytes = [&](const CaseSpec& c, bool backward) {
    std::vector<CpStats> stats(P);
    reference::RingRun run{P, Layout::kContiguous, MemoryLayout::kBSHD, 1, backward};
    run.dtype = c.dtype;
    run.stats = stats;
    run_ring(reference::make_problem(c), run);
    return stats[0].bytes_sent;
  };
  // Forward: P - 1 k/v blocks of 16 tokens x 2 heads x (16 + 16) dims.
  const int64_t kv32 = (P - 1) * 16 * 2 * 32 * 4;
  EXPECT_EQ(bytes(s32, false), kv32);
  EXPECT_EQ(bytes(s16, false), kv32 / 2);
  // Backward adds P - 1 k/v blocks again and P accumulators, always fp32.
  const int64_t grad = P * 16 * 2 * 32 * 4;
  EXPECT_EQ(bytes(s32, true), 2 * kv32 + grad);
  EXPECT_EQ(bytes(s16, true), kv32 + grad);
}

// The other strategies take fp32 only: a bf16 call fails on every rank, naming the strategy,
// with or without sinks, softcap, ALiBi and slices.
TEST(RingDtypeStrategies, NonRingStrategiesRefuse16BitTensors) {
  const Tensor x = dense_copy(Tensor({1, 8, 2, 8}).view(), DType::kBF16, MemoryLayout::kBSHD);
  AttentionParams featured;
  featured.sink = {0.5f, 1.0f};
  featured.softcap = 2.0f;
  featured.alibi_slopes = {0.5f, 0.25f};
  featured.slices = {{0, 8, 0, 8, SliceType::kCausal}};
  for (const AttentionParams& params : {AttentionParams{}, featured}) {
    for (Strategy s : {Strategy::allgather(), Strategy::ulysses()}) {
      CpOptions options;
      options.strategy = s;
      std::atomic<int> failed{0};
      try {
        run_ranks(2, [&](Communicator& comm) {
          const SequenceSharding seq = SequenceSharding::of(Layout::kContiguous, 8, 2, comm.rank());
          const Tensor piece = shard_tensor(x.view(), seq, comm.rank());
          try {
            attention_forward(comm, piece.view(), piece.view(), piece.view(), seq, params, {1, 0},
                              options);
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
            EXPECT_THAT(e.what(), ::testing::HasSubstr("takes fp32 tensors only, got bf16"));
            ++failed;
            throw;
          }
        });
      } catch (const Error&) {
      }
      EXPECT_EQ(failed.load(), 2) << strategy_name(s);
    }
  }
}

}  // namespace
}  // namespace cpattn::testing
