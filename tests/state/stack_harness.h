// Runs the residual attention stack (support/attention_stack.h) over P in-process ranks and
// gathers dL/dx_0 into whole-sequence order, for lifecycle tests.
#pragma once

#include <vector>

#include "cpattn/layout.h"
#include "cpattn/thread_communicator.h"
#include "support/attention_stack.h"

namespace cpattn::testing {

/// A whole-sequence problem: input x and loss weights w (L = sum w * x_L), both [B, S, H, D].
struct StackProblem {
  int64_t B = 1, S = 61, H = 2, D = 16;
  Layout layout = Layout::kZigzag;
  uint64_t seed = 7;
  Tensor x, w;
  StackProblem() = default;
  StackProblem(int64_t b, int64_t s, int64_t h, int64_t d, uint64_t data_seed)
      : B(b), S(s), H(h), D(d), seed(data_seed), x({b, s, h, d}), w({b, s, h, d}) {
    fill_uniform(x, data_seed);
    fill_uniform(w, data_seed + 1);
  }
  SequenceSharding sharding(int cp_size, int rank) const {
    SequenceSharding seq = SequenceSharding::of(layout, S, cp_size, rank);
    return seq;
  }
  /// Rank `rank`'s piece of the whole tensor t ([B, S, H, D], x or w) in this problem's layout.
  Tensor shard(const Tensor& t, int cp_size, int rank, MemoryCounter* counter) const {
    return shard_tensor(t.view(), sharding(cp_size, rank), rank, counter);
  }
  /// The global token indices rank `rank` holds.
  std::vector<int64_t> token_indices(int cp_size, int rank) const {
    return shard_token_indices(sharding(cp_size, rank), rank);
  }
};

/// A small causal call with dropout 0.1 on 4 heads (enough for Ulysses and the hybrid at
/// P <= 4), x used as q, k and v: the agreement and refusal tests' common problem.
struct CausalDropoutCase {
  StackProblem p{1, 37, 4, 8, 5};
  AttentionParams params;
  CausalDropoutCase() {
    params.causal = true;
    params.dropout_p = 0.1f;
  }
};

/// Copies a rank's [B, S_r, H, D] piece into whole-sequence flat BSHD order.
inline void gather_rows(ConstView piece, const std::vector<int64_t>& idx, int64_t seq_len,
                        std::vector<float>& whole) {
  const auto& s = piece.shape;
  for (int64_t b = 0; b < s[0]; ++b)
    for (size_t i = 0; i < idx.size(); ++i)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d)
          whole[static_cast<size_t>(((b * seq_len + idx[i]) * s[2] + h) * s[3] + d)] =
              piece(b, static_cast<int64_t>(i), h, d);
}

/// Forward + backward of the stack on cp_size ranks; returns dL/dx_0 for the whole sequence.
inline std::vector<float> stack_input_grad(const StackProblem& p, const StackConfig& config,
                                           int cp_size, bool recompute, uint64_t rng_seed = 1234) {
  std::vector<float> dx(static_cast<size_t>(p.x.numel()));
  run_ranks(cp_size, [&](Communicator& comm) {
    const int r = comm.rank();
    const SequenceSharding seq = p.sharding(cp_size, r);
    const Tensor x = p.shard(p.x, cp_size, r, &comm.memory());
    const Tensor w = p.shard(p.w, cp_size, r, &comm.memory());
    Generator generator(rng_seed);
    StackActivations acts = stack_forward(comm, config, x.view(), seq, generator, recompute);
    const Tensor grad = stack_backward(comm, config, acts, w.view(), seq);
    gather_rows(grad.view(), p.token_indices(cp_size, r), p.S, dx);
  });
  return dx;
}

/// max |a - b| / max |b|.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::abs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::abs(b[i])));
  }
  return num / den;
}

}  // namespace cpattn::testing
