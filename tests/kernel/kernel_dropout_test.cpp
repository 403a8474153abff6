// The kernel's dropout mask: recovered from its outputs it must equal the contract (forward and
// backward alike), and it must not depend on how keys and queries are split or ordered.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cpattn/kernel.h"
#include "support/metrics.h"
#include "support/problem_tensors.h"
#include "support/random_case.h"
#include "verify/reference_case.h"

namespace cpattn {
namespace {

struct MaskCase {
  const char* name;
  int64_t hq, hkv;
  bool causal;
  float p;
};

class KernelDropoutMask : public ::testing::TestWithParam<MaskCase> {};

// v_j = e_j (one-hot over Dv = Sk) makes out_i = sum_j Z_ij P_ij e_j, so out[i][j] = Z_ij P_ij:
// non-zero exactly where key j was kept. With dout_i = e_i, dv_j[i] = sum over the GQA group of
// Z_ij P_ij reveals the mask the backward used. Both must equal the contract formula.
TEST_P(KernelDropoutMask, ForwardAndBackwardUseTheContractMask) {
  const MaskCase mc = GetParam();
  constexpr int64_t kB = 2, kSq = 41, kSk = 56, kDqk = 16;
  const int64_t dv_width = std::max(kSq, kSk);
  reference::CaseSpec spec;
  spec.dims = {kB, kSq, kSk, mc.hq, mc.hkv, kDqk, dv_width};
  spec.positions = reference::PositionKind::kStriped;
  spec.dropout_p = mc.p;
  spec.seed = 77;
  reference::Problem p = reference::make_problem(spec);
  p.params.causal = mc.causal;
  for (int64_t& x : p.q_pos) x += (int64_t{1} << 33);  // beyond 32 bits: counter takes lo32
  for (int64_t& x : p.k_pos) x += (int64_t{1} << 33);
  const reference::Dims& d = p.dims;
  std::fill(p.v.begin(), p.v.end(), 0.0);
  std::fill(p.dout.begin(), p.dout.end(), 0.0);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t j = 0; j < kSk; ++j)
      for (int64_t h = 0; h < d.Hkv; ++h) p.v[((b * kSk + j) * d.Hkv + h) * dv_width + j] = 1.0;
    for (int64_t i = 0; i < kSq; ++i)
      for (int64_t h = 0; h < d.Hq; ++h) p.dout[((b * kSq + i) * d.Hq + h) * dv_width + i] = 1.0;
  }
  reference::Problem no_drop = p;
  no_drop.params.dropout_p = 0.0f;
  const reference::Outputs probs = reference::attention(no_drop, false);  // out[i][j] = P_ij
  const reference::Outputs got = reference::run_kernel(p, {MemoryLayout::kBSHD, 2, true});

  const int64_t group = d.Hq / d.Hkv;
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(mc.p));
  int64_t kept = 0, visible = 0;
  std::vector<double> dv_expected(got.dv.size(), 0.0);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < d.Hq; ++h)
      for (int64_t i = 0; i < kSq; ++i)
        for (int64_t j = 0; j < kSk; ++j) {
          const size_t at = static_cast<size_t>(((b * kSq + i) * d.Hq + h) * dv_width + j);
          const double prob = probs.out[at];
          const bool keep =
              reference::dropout_keep(p.rng, b, h, d.Hq, p.q_pos[i], p.k_pos[j], mc.p);
          if (prob == 0.0) {
            EXPECT_EQ(got.out[at], 0.0) << "masked key " << j << " leaked into row " << i;
            continue;
          }
          ++visible;
          kept += keep ? 1 : 0;
          ASSERT_EQ(got.out[at] != 0.0, keep)
              << "forward mask differs at b=" << b << " h=" << h << " i=" << i << " j=" << j;
          if (keep) {
            EXPECT_NEAR(got.out[at] / prob, keep_scale, 1e-4 * keep_scale);
          }
          dv_expected[static_cast<size_t>(((b * kSk + j) * d.Hkv + h / group) * dv_width + i)] +=
              keep ? keep_scale * prob : 0.0;
        }
  // dv reveals the backward's mask: each entry is a sum of kept Z P terms over the group.
  EXPECT_LT(testing::relative_error(got.dv, dv_expected), 1e-5);
  if (group == 1) {
    for (size_t e = 0; e < got.dv.size(); ++e) {
      ASSERT_EQ(got.dv[e] != 0.0, dv_expected[e] != 0.0) << "backward mask differs at " << e;
    }
  }
  const double fraction = static_cast<double>(kept) / static_cast<double>(visible);
  EXPECT_NEAR(fraction, 1.0 - mc.p, 0.05) << kept << " of " << visible;
}

INSTANTIATE_TEST_SUITE_P(Cases, KernelDropoutMask,
                         ::testing::Values(MaskCase{"Full_MHA2_p0p1", 2, 2, false, 0.1f},
                                           MaskCase{"Causal_MHA3_p0p5", 3, 3, true, 0.5f},
                                           MaskCase{"Causal_GQA4x1_p0p5", 4, 1, true, 0.5f}),
                         [](const auto& p) { return std::string(p.param.name); });

// Kernel outputs over a subset of keys (positions and data of the chosen rows only).
reference::Problem subset_keys(const reference::Problem& p, const std::vector<int64_t>& keys) {
  reference::Problem s = p;
  const reference::Dims& d = p.dims;
  s.dims.Sk = static_cast<int64_t>(keys.size());
  s.k_pos.clear();
  s.k_doc.clear();
  s.k.clear();
  s.v.clear();
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t j : keys) {
      const auto k_row = p.k.begin() + (b * d.Sk + j) * d.Hkv * d.Dqk;
      const auto v_row = p.v.begin() + (b * d.Sk + j) * d.Hkv * d.Dv;
      s.k.insert(s.k.end(), k_row, k_row + d.Hkv * d.Dqk);
      s.v.insert(s.v.end(), v_row, v_row + d.Hkv * d.Dv);
    }
  for (int64_t j : keys) {
    s.k_pos.push_back(p.k_pos[j]);
    if (!p.k_doc.empty()) s.k_doc.push_back(p.k_doc[j]);
  }
  return s;
}

// The mask and the dropout mask depend on global positions only, so attention over keys dealt
// into shards in any order, merged with the fp32 LSE rule, equals attention over all keys; and
// backward per shard (given the merged out and lse) gives the same dk, dv and, summed, dq.
RC_GTEST_PROP(KernelDropoutPartition, ShardedKeysMergeToTheWholeAnswer, ()) {
  reference::CaseSpec spec;
  spec.mask = *rc::gen::element(reference::MaskKind::kNone, reference::MaskKind::kCausal,
                                reference::MaskKind::kWindow, reference::MaskKind::kCausalWindow,
                                reference::MaskKind::kDocs, reference::MaskKind::kDocsCausal);
  spec.dims = testing::draw_dims(
      {.sq_end = 40, .sk_begin = 2, .sk_end = 70, .dqk = {8, 16, 40}, .dv = {8, 24}});
  spec.positions = testing::draw_positions();
  spec.dropout_p = *rc::gen::element(0.0f, 0.1f, 0.5f);
  spec.seed = *rc::gen::inRange<uint64_t>(1, 1u << 30);
  const reference::Problem p = reference::make_problem(spec);
  const reference::Dims& d = p.dims;
  const int shards = *rc::gen::inRange(2, 5);

  // Deal a shuffled key order into `shards` runs at random cut points (runs may be empty).
  std::vector<int64_t> order(static_cast<size_t>(d.Sk));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 gen(spec.seed);
  std::shuffle(order.begin(), order.end(), gen);
  std::vector<size_t> cuts = {0, order.size()};
  for (int s = 1; s < shards; ++s) cuts.push_back(gen() % (order.size() + 1));
  std::sort(cuts.begin(), cuts.end());

  const reference::Outputs whole = reference::run_kernel(p, {MemoryLayout::kBSHD, 1, true});
  const size_t rows = whole.lse.size();
  std::vector<double> lse(rows, -INFINITY), acc_out(whole.out.size(), 0.0);
  std::vector<double> dq(whole.dq.size(), 0.0), dk(whole.dk.size(), 0.0), dv(whole.dv.size(), 0.0);
  std::vector<reference::Outputs> parts;
  std::vector<std::vector<int64_t>> part_keys;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    part_keys.emplace_back(order.begin() + cuts[c], order.begin() + cuts[c + 1]);
    parts.push_back(
        reference::run_kernel(subset_keys(p, part_keys.back()), {MemoryLayout::kBSHD, 1, false}));
    for (size_t r = 0; r < rows; ++r) {
      const double a = lse[r], b = parts.back().lse[r];
      const double m = std::max(a, b);
      lse[r] = m == -INFINITY ? m : m + std::log(std::exp(a - m) + std::exp(b - m));
    }
  }
  // out = sum_s out_s * exp(lse_s - lse), row (b, h, i) of lse <-> out[b, i, h, :].
  for (const reference::Outputs& part : parts)
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t i = 0; i < d.Sq; ++i)
        for (int64_t h = 0; h < d.Hq; ++h) {
          const size_t r = static_cast<size_t>((b * d.Hq + h) * d.Sq + i);
          if (part.lse[r] == -INFINITY) continue;
          const double w = std::exp(part.lse[r] - lse[r]);
          for (int64_t e = 0; e < d.Dv; ++e) {
            const size_t at = static_cast<size_t>(((b * d.Sq + i) * d.Hq + h) * d.Dv + e);
            acc_out[at] += w * part.out[at];
          }
        }
  RC_ASSERT(reference::max_abs_error(lse, whole.lse) <= 1e-5 * (1 + testing::max_magnitude(lse)));
  RC_ASSERT(testing::relative_error(acc_out, whole.out) <= 1e-5);

  // Backward per shard with the whole out and lse (what a ring passes).
  testing::ProblemTensors whole_tensors(p);
  Tensor out = whole_tensors.new_out();
  std::vector<float> whole_lse = whole_tensors.new_lse();
  attention_kernel_forward(whole_tensors.inputs, p.params, p.rng, out.view(), whole_lse);
  for (const std::vector<int64_t>& keys : part_keys) {
    const reference::Problem sp = subset_keys(p, keys);
    testing::ProblemTensors t(sp);
    Tensor sdq = t.new_like_q(), sdk = t.new_like_k(), sdv = t.new_like_v();
    attention_kernel_backward(t.inputs, sp.params, sp.rng, t.dout.view(), out.view(), whole_lse,
                              sdq.view(), sdk.view(), sdv.view());
    for (size_t e = 0; e < dq.size(); ++e) dq[e] += sdq.data()[e];
    for (int64_t b = 0; b < d.B; ++b)
      for (size_t j = 0; j < keys.size(); ++j) {
        const int64_t kd = d.Hkv * d.Dqk, vd = d.Hkv * d.Dv, sk = sp.dims.Sk;
        for (int64_t e = 0; e < kd; ++e)
          dk[(b * d.Sk + keys[j]) * kd + e] =
              sdk.data()[(b * sk + static_cast<int64_t>(j)) * kd + e];
        for (int64_t e = 0; e < vd; ++e)
          dv[(b * d.Sk + keys[j]) * vd + e] =
              sdv.data()[(b * sk + static_cast<int64_t>(j)) * vd + e];
      }
  }
  RC_ASSERT(testing::relative_error(dq, whole.dq) <= 1e-5);
  RC_ASSERT(testing::relative_error(dk, whole.dk) <= 1e-5);
  RC_ASSERT(testing::relative_error(dv, whole.dv) <= 1e-5);
}

// Reordering the queries (and their positions) permutes the output rows and nothing else.
RC_GTEST_PROP(KernelDropoutPartition, PermutedQueriesPermuteRows, ()) {
  reference::CaseSpec spec;
  spec.mask = *rc::gen::element(reference::MaskKind::kCausal, reference::MaskKind::kDocsCausal,
                                reference::MaskKind::kWindow);
  spec.dims = {1, *rc::gen::inRange<int64_t>(1, 50), *rc::gen::inRange<int64_t>(1, 60), 2, 1, 16,
               8};
  spec.positions = reference::PositionKind::kStriped;
  spec.dropout_p = *rc::gen::element(0.1f, 0.5f);
  spec.seed = *rc::gen::inRange<uint64_t>(1, 1u << 30);
  const reference::Problem p = reference::make_problem(spec);
  const reference::Dims& d = p.dims;
  std::vector<int64_t> perm(static_cast<size_t>(d.Sq));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 gen(spec.seed);
  std::shuffle(perm.begin(), perm.end(), gen);
  reference::Problem permuted = p;
  for (int64_t i = 0; i < d.Sq; ++i) {
    const int64_t src = perm[i];
    permuted.q_pos[i] = p.q_pos[src];
    if (!p.q_doc.empty()) permuted.q_doc[i] = p.q_doc[src];
    for (int64_t h = 0; h < d.Hq; ++h) {
      std::copy_n(p.q.begin() + (src * d.Hq + h) * d.Dqk, d.Dqk,
                  permuted.q.begin() + (i * d.Hq + h) * d.Dqk);
      std::copy_n(p.dout.begin() + (src * d.Hq + h) * d.Dv, d.Dv,
                  permuted.dout.begin() + (i * d.Hq + h) * d.Dv);
    }
  }
  const reference::Outputs a = reference::run_kernel(p, {MemoryLayout::kBSHD, 1, true});
  const reference::Outputs b = reference::run_kernel(permuted, {MemoryLayout::kBSHD, 1, true});
  std::vector<double> out_back(a.out.size()), lse_back(a.lse.size()), dq_back(a.dq.size());
  for (int64_t i = 0; i < d.Sq; ++i)
    for (int64_t h = 0; h < d.Hq; ++h) {
      const int64_t src = perm[i];
      lse_back[h * d.Sq + src] = b.lse[h * d.Sq + i];
      std::copy_n(b.out.begin() + (i * d.Hq + h) * d.Dv, d.Dv,
                  out_back.begin() + (src * d.Hq + h) * d.Dv);
      std::copy_n(b.dq.begin() + (i * d.Hq + h) * d.Dqk, d.Dqk,
                  dq_back.begin() + (src * d.Hq + h) * d.Dqk);
    }
  RC_ASSERT(testing::relative_error(out_back, a.out) <= 1e-5);
  RC_ASSERT(reference::max_abs_error(lse_back, a.lse) <=
            1e-5 * (1 + testing::max_magnitude(a.lse)));
  RC_ASSERT(testing::relative_error(dq_back, a.dq) <= 1e-5);
  RC_ASSERT(testing::relative_error(b.dk, a.dk) <= 1e-5);
  RC_ASSERT(testing::relative_error(b.dv, a.dv) <= 1e-5);
}

}  // namespace
}  // namespace cpattn
