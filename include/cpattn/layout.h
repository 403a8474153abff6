// Sequence layouts of context parallelism (docs/design.md section 5): which global tokens each of P
// ranks holds, and shard/unshard helpers between a whole [B, S, H, D] tensor and the per-rank
// pieces.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// How a sequence of S tokens is split over P ranks. Every layout works for any S >= 0 and
/// P >= 1: chunk sizes differ by at most one token, a rank may hold zero tokens, nothing is padded.
enum class Layout {
  /// Rank r holds chunk r of P equal chunks. Simple, but causal work is unbalanced (the last rank
  /// sees every key, the first only its own).
  kContiguous,
  /// Head-tail: the sequence is cut into 2P chunks and rank r holds chunks r and 2P-1-r, in that
  /// order. Each rank gets one early and one late chunk, so causal work is balanced.
  kZigzag,
  /// Round-robin: token t goes to rank t % P (local order ascending). Balanced for causal masks.
  kStriped,
};

/// "contiguous" | "zigzag" | "striped".
const char* layout_name(Layout layout) noexcept;
/// Inverse of layout_name; throws Error(kInvalidArgument) naming the accepted names.
Layout parse_layout(std::string_view name);

/// [begin, end) of chunk c when `length` tokens are cut into `num_chunks` chunks whose sizes
/// differ by at most one (the first length % num_chunks chunks get the extra token).
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
TokenRange chunk_range(int64_t length, int64_t num_chunks, int64_t chunk);

/// Number of tokens rank `rank` holds. Throws Error(kInvalidArgument) unless seq_len >= 0,
/// cp_size >= 1 and 0 <= rank < cp_size (as do all functions below).
int64_t shard_length(Layout layout, int64_t seq_len, int cp_size, int rank);

/// Global token indices rank `rank` holds, in local order (local token i is global token
/// result[i]). Contiguous: chunk r; zigzag: chunk r then chunk 2P-1-r; striped: r, r+P, r+2P, ...
/// Example, S = 10, P = 2: contiguous r0 {0..4}, r1 {5..9}; zigzag (chunks 3,3,2,2) r0 {0,1,2,8,9},
/// r1 {3,4,5,6,7}; striped r0 {0,2,4,6,8}, r1 {1,3,5,7,9}.
std::vector<int64_t> shard_token_indices(Layout layout, int64_t seq_len, int cp_size, int rank);

/// The values of a per-token array (positions, document ids) that rank `rank` holds:
/// result[i] = global[shard_token_indices(...)[i]]. global.size() is S.
std::vector<int64_t> shard_values(std::span<const int64_t> global, Layout layout, int cp_size,
                                  int rank);

/// Rank `rank`'s piece of a whole [B, S, H, D] tensor (any strides) as a dense BSHD Tensor
/// [B, S_r, H, D] of the same dtype, charged to `counter` (process_memory() when null).
Tensor shard_tensor(ConstView global, Layout layout, int cp_size, int rank,
                    MemoryCounter* counter = nullptr);

/// Inverse of shard_tensor: pieces[r] is rank r's [B, S_r, H, D] view (any strides, shapes as
/// shard_length says); returns the dense BSHD [B, S, H, D] tensor (of piece 0's dtype). Throws
/// Error(kShapeMismatch) if pieces.size() != P or a piece's shape is not the expected one.
Tensor unshard_tensor(std::span<const ConstView> pieces, Layout layout, int64_t seq_len,
                      MemoryCounter* counter = nullptr);

/// Rank `rank`'s piece of an lse-like tensor [B, H, S] (dense): returns [B, H, S_r].
Tensor shard_lse(const Tensor& global, Layout layout, int cp_size, int rank,
                 MemoryCounter* counter = nullptr);
/// Inverse of shard_lse: pieces[r] is [B, H, S_r]; returns [B, H, S].
Tensor unshard_lse(std::span<const Tensor> pieces, Layout layout, int64_t seq_len,
                   MemoryCounter* counter = nullptr);

/// How one sequence (q, or k/v) is split over the CP group, and where its tokens sit. A plain
/// value: every rank holds an identical copy apart from cp_rank, so any rank can compute the
/// positions and document ids of any other rank's block (the ring sends only k/v and gradients).
struct SequenceSharding {
  Layout layout = Layout::kContiguous;
  int64_t seq_len = 0;  ///< S, tokens of the whole sequence
  int cp_size = 1;      ///< P
  int cp_rank = 0;      ///< this rank, in [0, P)
  /// Global position of each token (indexed by global token index, length S), used by masks and
  /// dropout. Empty: position = token index. Non-identity positions serve sequences that are a
  /// window of a longer one (e.g. Sq != Sk with offset queries).
  std::vector<int64_t> positions;
  /// Document id of each token (length S) for packed sequences; empty: one document. Known to every
  /// rank (8 bytes per token, tiny next to k/v), so document ids never travel.
  std::vector<int64_t> docs;

  /// The sharding of tokens 0..seq_len-1 at positions 0..seq_len-1, one document (positions and
  /// docs left empty; set them afterwards for other positions or packed documents).
  static SequenceSharding of(Layout layout, int64_t seq_len, int cp_size, int cp_rank) {
    SequenceSharding s;
    s.layout = layout;
    s.seq_len = seq_len;
    s.cp_size = cp_size;
    s.cp_rank = cp_rank;
    return s;
  }

  /// Throws Error(kInvalidArgument | kShapeMismatch) naming the bad field.
  void validate() const;
  int64_t local_length(int rank) const { return shard_length(layout, seq_len, cp_size, rank); }
  int64_t local_length() const { return local_length(cp_rank); }
  /// Global positions of rank `rank`'s tokens, in local order.
  std::vector<int64_t> local_positions(int rank) const;
  std::vector<int64_t> local_positions() const { return local_positions(cp_rank); }
  /// Document ids of rank `rank`'s tokens (empty when docs is empty).
  std::vector<int64_t> local_docs(int rank) const;
  std::vector<int64_t> local_docs() const { return local_docs(cp_rank); }
};

}  // namespace cpattn
