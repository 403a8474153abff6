// Rotary position embedding (RoPE; Su et al., "RoFormer", 2021) on q/k head rows, driven by each
// token's GLOBAL position, so a CP shard rotates its tokens exactly as the full sequence would.
#pragma once

#include <cstdint>
#include <span>

namespace cpattn::train {

/// Where the heads to rotate sit: n token rows, each holding `heads` vectors of head_dim floats
/// back to back, rows `row_stride` floats apart. With the fused QKV output (row = [q | k | v]),
/// q is {n, heads, D, qkv_dim} at offset 0 and k is {n, kv_heads, D, qkv_dim} at offset q_dim.
struct RopeDims {
  int64_t n = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;    ///< even
  int64_t row_stride = 0;  ///< >= heads * head_dim
};

/// Rotates interleaved pairs (x[2i], x[2i+1]), i in [0, D/2), of every head of row r by
/// angle = pos[r] * base^(-2i/D) (the original RoFormer / GPT-J pairing, not the half split):
///   x'[2i] = x[2i] cos - x[2i+1] sin,   x'[2i+1] = x[2i] sin + x[2i+1] cos
/// in place. Angles, cos and sin are evaluated in double (positions can be large) and rounded
/// once.
/// \param[in,out] x      at least (n-1)*row_stride + heads*head_dim floats
/// \param[in] positions  [n] global int64 token positions
/// Throws Error(kShapeMismatch) when x or positions is too short / long, kInvalidArgument on an
/// odd head_dim, row_stride < heads*head_dim, base <= 1 or negative sizes.
void rope_forward(RopeDims dims, std::span<float> x, std::span<const int64_t> positions,
                  double base);

/// Backward of rope_forward: the rotation is orthogonal, so dL/dx is dL/dx' rotated by the
/// inverse angle (-angle), in place on `grad`. Same arguments and errors as rope_forward.
void rope_backward(RopeDims dims, std::span<float> grad, std::span<const int64_t> positions,
                   double base);

}  // namespace cpattn::train
