// Rotary position embedding (RoPE; Su et al., "RoFormer", 2021) on q/k head rows, driven by each
// token's GLOBAL position, so a CP shard rotates its tokens exactly as the full sequence would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

/// The cos and sin of every rotation angle of n token rows:
///   angle(r, i) = positions[r] * base^(-2i/D),  i in [0, D/2)
/// evaluated in double (positions can be large) and rounded once to float. Built once per step
/// and shared by every RoPE call of it (q and k, forward, recompute and backward of every layer),
/// so the per-element sincos and pow run once per (row, pair) and step.
class RopeTable {
 public:
  /// \param positions  [n] global int64 token positions of the rows
  /// \param head_dim   D, even and >= 2
  /// \param base       the frequency base (10000 in RoFormer), finite and > 1
  /// Throws Error(kInvalidArgument) on an odd or too small head_dim or a bad base.
  RopeTable(std::span<const int64_t> positions, int64_t head_dim, double base);

  int64_t rows() const { return rows_; }
  int64_t head_dim() const { return head_dim_; }
  /// cos / sin of row r's D/2 angles.
  const float* cos_row(int64_t r) const { return cos_.data() + r * (head_dim_ / 2); }
  const float* sin_row(int64_t r) const { return sin_.data() + r * (head_dim_ / 2); }

 private:
  int64_t rows_ = 0;
  int64_t head_dim_ = 0;
  std::vector<float> cos_;  ///< [n, D/2]
  std::vector<float> sin_;  ///< [n, D/2]
};

/// Rotates interleaved pairs (x[2i], x[2i+1]), i in [0, D/2), of every head of row r by the
/// table's angle(r, i) (the original RoFormer / GPT-J pairing, not the half split):
///   x'[2i] = x[2i] cos - x[2i+1] sin,   x'[2i+1] = x[2i] sin + x[2i+1] cos
/// in place.
/// \param[in,out] x  at least (n-1)*row_stride + heads*head_dim floats
/// \param[in] table  the angles of the same n rows and head_dim
/// Throws Error(kShapeMismatch) when x is too short or the table's rows or head_dim differ from
/// dims, kInvalidArgument on row_stride < heads*head_dim or negative sizes.
void rope_forward(RopeDims dims, std::span<float> x, const RopeTable& table);

/// Backward of rope_forward: the rotation is orthogonal, so dL/dx is dL/dx' rotated by the
/// inverse angle (-angle), in place on `grad`. Same arguments and errors as rope_forward.
void rope_backward(RopeDims dims, std::span<float> grad, const RopeTable& table);

}  // namespace cpattn::train
