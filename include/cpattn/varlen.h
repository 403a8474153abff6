// Variable-length packed sequences in flash-attn's convention (cu_seqlens, thd tensors): the one
// rule that turns cumulative document lengths into the global positions and document ids of the
// mask (docs/design.md section 1.2). The single-rank path, every CP layout (layout.h,
// varlen_shardings), the Python package and `cpattn verify --varlen` call it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cpattn {

/// Global positions and document ids of a varlen call's tokens, the kernel's AttentionInputs
/// q_pos / q_doc (total_q entries, token order) and k_pos / k_doc (total_k entries).
struct VarlenTokens {
  std::vector<int64_t> q_pos, k_pos;
  std::vector<int64_t> q_doc, k_doc;
};

/// The document id of each of the `total` tokens of one tensor whose documents' cumulative
/// lengths are cu_seqlens (D + 1 entries, int64): tokens cu_seqlens[d] .. cu_seqlens[d+1]-1 are
/// document d. `name` and `tensor` name the array and its tensor in errors. Throws
/// Error(kInvalidArgument) when cu_seqlens is empty, does not start at 0 or decreases, and
/// Error(kShapeMismatch) when it does not end at `total` ("cu_seqlens_q ends at 300 but q has 301
/// tokens").
std::vector<int64_t> varlen_doc_ids(std::span<const int64_t> cu_seqlens, int64_t total,
                                    const char* name, const char* tensor);

/// The positions and document ids of flash-attn 2.x's `flash_attn_varlen_func` convention.
/// cu_seqlens_q / cu_seqlens_k: D + 1 cumulative lengths (int64) of D documents; document d's
/// queries are tokens cu_seqlens_q[d] .. cu_seqlens_q[d+1]-1 of q, its keys tokens
/// cu_seqlens_k[d] .. cu_seqlens_k[d+1]-1 of k and v; total_q / total_k: the tokens of the q and
/// k tensors (thd [total, H, D], a [1, total, H, D] view in C++). Any lengths, 0 included (an
/// empty document); a document with Lq > 0 and Lk = 0 gives its queries no key (out 0, lse -inf).
/// Computes, with Lq_d, Lk_d the document's lengths, span_d = max(Lq_d, Lk_d), base_0 = 0 and
/// base_{d+1} = base_d + span_d:
///   q_pos[cu_seqlens_q[d] + i] = base_d + span_d - Lq_d + i,   q_doc = d   (0 <= i < Lq_d)
///   k_pos[cu_seqlens_k[d] + j] = base_d + span_d - Lk_d + j,   k_doc = d   (0 <= j < Lk_d)
/// so that, within a document, causal and sliding windows are aligned bottom-right as in
/// flash-attn when Lq != Lk (key j visible to query i iff j <= i + Lk - Lq under causal; a window
/// (left, right) is taken relative to that diagonal), documents never see each other, and the
/// documents' positions are disjoint (their dropout streams differ, section 4). When
/// cu_seqlens_q == cu_seqlens_k the positions are the token indices.
/// Throws Error(kInvalidArgument) when a cu_seqlens is empty, does not start at 0 or decreases,
/// or the two list different numbers of documents; Error(kShapeMismatch) when one does not end at
/// its tensor's token count ("cu_seqlens_q ends at 300 but q has 301 tokens").
VarlenTokens varlen_tokens(std::span<const int64_t> cu_seqlens_q,
                           std::span<const int64_t> cu_seqlens_k, int64_t total_q, int64_t total_k);

/// flash-attn's max_seqlen_q / max_seqlen_k arguments (the Python API takes them; cpattn needs
/// no grid size): throws Error(kInvalidArgument) naming the document unless max_seqlen_q is at
/// least every document's queries and max_seqlen_k its keys ("max_seqlen_q is 4 but document 1
/// has 5 queries"). The cumulative lengths must have passed varlen_tokens.
void check_varlen_max_seqlen(std::span<const int64_t> cu_seqlens_q,
                             std::span<const int64_t> cu_seqlens_k, int64_t max_seqlen_q,
                             int64_t max_seqlen_k);

}  // namespace cpattn
