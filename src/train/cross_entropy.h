// Next-token cross-entropy over LM-head logits, normalised by a caller-given GLOBAL token count so
// that the per-rank values of a CP shard sum (all-reduce) to the exact mean over the sequence.
#pragma once

#include <cstdint>
#include <span>

namespace cpattn::train {

/// Computes: sum_n (lse_n - logits[n, targets[n]]) / total_count,
///   lse_n = m_n + log sum_v exp(logits[n, v] - m_n),  m_n = max_v logits[n, v]
/// stable for any finite logits: each logits[n, v] - m_n and its exp in float (the difference
/// rounded once, the exp within 1.5 ulp: train/vector_math.h), their sum, the log and the mean in
/// double, rows summed in order. Each lse_n is within (ln(vocab) + 3) 2^-24 of the exact value
/// (the rounded differences weighted by their exps, plus the exps' own error): 8e-7 at a
/// vocabulary of 2^16 (tests/train/cross_entropy_test.cpp). A NaN or +inf logit, or a row of
/// -inf, gives a NaN loss (and NaN gradients for that row).
/// \param[in] logits   [N, vocab]
/// \param[in] targets  [N] ids in [0, vocab)
/// \param total_count  tokens in the GLOBAL mean (>= 1 and >= N): the whole batch's count when
///                     this call sees only one rank's shard of it.
/// Throws Error(kInvalidArgument) on a target outside [0, vocab), total_count < max(1, N) or
/// bad sizes; kShapeMismatch when a span's size disagrees.
double cross_entropy_forward(int64_t vocab, std::span<const float> logits,
                             std::span<const int32_t> targets, int64_t total_count);

/// Backward of cross_entropy_forward scaled by dloss (dL/d(loss), usually 1):
///   dlogits[n, v] = dloss * (softmax(logits[n])_v - [v == targets[n]]) / total_count
/// dlogits [N, vocab] is overwritten and may alias logits. Returns the loss as well: bitwise
/// what cross_entropy_forward returns for the same arguments (the same exps, summed in the same
/// order), so a training step needs no separate forward call. Throws like cross_entropy_forward.
double cross_entropy_backward(int64_t vocab, std::span<const float> logits,
                              std::span<const int32_t> targets, int64_t total_count, float dloss,
                              std::span<float> dlogits);

}  // namespace cpattn::train
