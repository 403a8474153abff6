// Token embedding lookup (a row gather) and its backward (a scatter-add into the table).
#pragma once

#include <cstdint>
#include <span>

namespace cpattn::train {

/// Computes: out[n, :] = table[tokens[n], :].
/// \param[in]  tokens  [N] token ids in [0, vocab)
/// \param[in]  table   [vocab, d]
/// \param[out] out     [N, d] (overwritten)
/// Throws Error(kInvalidArgument) naming the row and id of a token outside [0, vocab) (or bad
/// sizes), kShapeMismatch when a span's size disagrees.
void embedding_forward(int64_t vocab, int64_t d, std::span<const int32_t> tokens,
                       std::span<const float> table, std::span<float> out);

/// Backward of embedding_forward: dtable[tokens[n], :] += dout[n, :] for n = 0, 1, ... in order
/// (fixed order, so repeated tokens sum deterministically). Throws like embedding_forward.
void embedding_backward(int64_t vocab, int64_t d, std::span<const int32_t> tokens,
                        std::span<const float> dout, std::span<float> dtable);

}  // namespace cpattn::train
