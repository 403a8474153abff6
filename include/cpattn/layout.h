// Sequence layouts of context parallelism (docs/design.md section 5): which global tokens each of P
// ranks holds, and shard/unshard helpers between a whole [B, S, H, D] tensor and the per-rank
// pieces.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"

namespace cpattn {

/// How a sequence of S tokens is split over P ranks. Every layout works for any S >= 0 and
/// P >= 1: nothing is padded and a rank may hold zero tokens. Local order is ascending global
/// token index in every layout.
enum class Layout {
  /// Rank r holds chunk r of P equal chunks. Simple, but causal work is unbalanced (the last rank
  /// sees every key, the first only its own).
  kContiguous,
  /// Head-tail: the sequence is cut into 2P chunks and rank r holds chunks r and 2P-1-r, in that
  /// order. Each rank gets one early and one late chunk, so causal work is balanced.
  kZigzag,
  /// Round-robin: token t goes to rank t % P (local order ascending). Balanced for causal masks.
  kStriped,
  /// Document-balanced zigzag: every document (a maximal run of equal ids in
  /// SequenceSharding::docs; without docs the whole sequence is one) is zigzagged over the ranks
  /// on its own, so packed documents of mixed lengths load the ranks alike under causal and
  /// document masks, where kZigzag over the whole sequence does not. Document d of L_d tokens is
  /// cut into 2P chunks (chunk_range(L_d, 2P, c)) and, with its rotation o_d, rank
  /// (o_d + c) mod P holds chunks c and 2P-1-c (c < P), in that order, documents in sequence
  /// order. The rotations spread the L_d mod 2P chunks that hold an extra token (and whole short
  /// documents) over the ranks: they are chosen greedily, document by document, from the tokens
  /// T[r] and causal pairs C[r] (sum over its tokens of 1 + the token's offset in its document)
  /// each rank holds of the documents before: o_d minimises sum_r T[r] n(r), then sum_r C[r] w(r),
  /// then o_d itself, where n(r), w(r) are the tokens and causal pairs document d gives rank r
  /// under that rotation (loads relative to the least loaded rank, exact integers). The first
  /// document, and any whose length is a multiple of 2P, gets o_d = 0, so a sequence of one
  /// document is split exactly as kZigzag. Measured (docs/design.md section 5.1): the ranks'
  /// token counts differ by at most 2 and the busiest rank's visible pairs are within 0.6% of the
  /// mean for mixed lengths, causal and full. A rank holds pieces of L_d / P tokens of every
  /// document; the kernel's tiles end at document boundaries and position jumps (tile_spans,
  /// cpattn/mask.h), so those pieces cost their visible pairs, not whole tiles of mixed
  /// documents.
  kDocZigzag,
};

/// Every layout, in declaration order (the one list parse_layout and the CLI's choices use).
inline constexpr std::array<Layout, 4> kLayouts = {Layout::kContiguous, Layout::kZigzag,
                                                   Layout::kStriped, Layout::kDocZigzag};

/// "contiguous" | "zigzag" | "striped" | "doc_zigzag".
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

/// How one sequence (q, or k/v) is split over the CP group, and where its tokens sit. A plain
/// value: every rank holds an identical copy apart from cp_rank, so any rank can compute the
/// positions and document ids of any other rank's block (the ring sends only k/v and gradients).
/// It is also the argument of every layout function below: which tokens a rank holds depends on
/// layout, seq_len, cp_size and, for kDocZigzag, docs.
struct SequenceSharding {
  Layout layout = Layout::kContiguous;
  int64_t seq_len = 0;  ///< S, tokens of the whole sequence
  int cp_size = 1;      ///< P
  int cp_rank = 0;      ///< this rank, in [0, P)
  /// Global position of each token (indexed by global token index, length S), used by masks and
  /// dropout. Empty: position = token index. Non-identity positions serve sequences that are a
  /// window of a longer one (e.g. Sq != Sk with offset queries) and varlen calls whose documents
  /// have Lq != Lk (varlen_shardings).
  std::vector<int64_t> positions;
  /// Document id of each token (length S) for packed sequences; empty: one document. Known to every
  /// rank (8 bytes per token, tiny next to k/v), so document ids never travel. kDocZigzag splits
  /// each maximal run of equal ids on its own.
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
  /// Tokens rank `rank` holds (shard_length).
  int64_t local_length(int rank) const;
  int64_t local_length() const { return local_length(cp_rank); }
  /// Global positions of rank `rank`'s tokens, in local order.
  std::vector<int64_t> local_positions(int rank) const;
  std::vector<int64_t> local_positions() const { return local_positions(cp_rank); }
  /// Document ids of rank `rank`'s tokens (empty when docs is empty).
  std::vector<int64_t> local_docs(int rank) const;
  std::vector<int64_t> local_docs() const { return local_docs(cp_rank); }
};

// The layout functions. `seq` gives the split (layout, seq_len, cp_size, docs; its cp_rank and
// positions are not read) and `rank` the rank asked about. Each throws Error(kInvalidArgument)
// unless seq_len >= 0, cp_size >= 1 and 0 <= rank < cp_size, and Error(kShapeMismatch) unless
// docs is empty or holds seq_len ids.

/// Number of tokens rank `rank` holds.
int64_t shard_length(const SequenceSharding& seq, int rank);

/// Global token indices rank `rank` holds, in local order (local token i is global token
/// result[i]). Contiguous: chunk r; zigzag: chunk r then chunk 2P-1-r; striped: r, r+P, r+2P, ...;
/// doc_zigzag: per document as Layout::kDocZigzag says. Example, S = 10, P = 2: contiguous r0
/// {0..4}, r1 {5..9}; zigzag (chunks 3,3,2,2) r0 {0,1,2,8,9}, r1 {3,4,5,6,7}; striped r0
/// {0,2,4,6,8}, r1 {1,3,5,7,9}; doc_zigzag with two documents of 3 tokens r0 {0,4,5}, r1 {1,2,3}
/// (the first gives rank 1 two tokens, so the second is rotated by 1: rank 1 takes its chunks 0
/// and 3, rank 0 its chunks 1 and 2).
std::vector<int64_t> shard_token_indices(const SequenceSharding& seq, int rank);

/// The values of a per-token array (positions, document ids) that rank `rank` holds:
/// result[i] = global[shard_token_indices(seq, rank)[i]]. Throws Error(kShapeMismatch) unless
/// global.size() is seq.seq_len.
std::vector<int64_t> shard_values(std::span<const int64_t> global, const SequenceSharding& seq,
                                  int rank);

/// Rank `rank`'s piece of a whole [B, S, H, D] tensor (any strides) as a dense BSHD Tensor
/// [B, S_r, H, D] of the same dtype, charged to `counter` (process_memory() when null). Throws
/// Error(kShapeMismatch) unless the tensor has seq.seq_len tokens.
Tensor shard_tensor(ConstView global, const SequenceSharding& seq, int rank,
                    MemoryCounter* counter = nullptr);

/// Inverse of shard_tensor: pieces[r] is rank r's [B, S_r, H, D] view (any strides, shapes as
/// shard_length says); returns the dense BSHD [B, S, H, D] tensor (of piece 0's dtype). Throws
/// Error(kShapeMismatch) if pieces.size() != seq.cp_size or a piece's shape is not the expected
/// one.
Tensor unshard_tensor(std::span<const ConstView> pieces, const SequenceSharding& seq,
                      MemoryCounter* counter = nullptr);

/// Rank `rank`'s piece of an lse-like tensor [B, H, S] (dense): returns [B, H, S_r].
Tensor shard_lse(const Tensor& global, const SequenceSharding& seq, int rank,
                 MemoryCounter* counter = nullptr);
/// Inverse of shard_lse: pieces[r] is [B, H, S_r]; returns [B, H, S].
Tensor unshard_lse(std::span<const Tensor> pieces, const SequenceSharding& seq,
                   MemoryCounter* counter = nullptr);

/// The q and k/v shardings of a varlen call (flash-attn's cu_seqlens; cpattn/varlen.h).
struct VarlenShardings {
  SequenceSharding q, kv;
};

/// The shardings of a varlen call over cp_size ranks in `layout`, for rank cp_rank: the WHOLE
/// sequence's cu_seqlens_q / cu_seqlens_k (every rank passes the same) and token counts total_q /
/// total_k, turned into positions and document ids by varlen_tokens (varlen.h; its errors), the
/// document ids being the document's index d. positions is left empty where it is the token
/// index (always when cu_seqlens_q == cu_seqlens_k). With Layout::kDocZigzag every document is
/// balanced over the ranks. Throws Error(kInvalidArgument) for a bad cp_size or cp_rank.
VarlenShardings varlen_shardings(Layout layout, std::span<const int64_t> cu_seqlens_q,
                                 std::span<const int64_t> cu_seqlens_k, int64_t total_q,
                                 int64_t total_k, int cp_size, int cp_rank);

}  // namespace cpattn
