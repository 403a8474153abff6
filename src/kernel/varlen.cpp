// flash-attn's cu_seqlens as global positions and document ids (varlen.h).
#include "cpattn/varlen.h"

#include <algorithm>

#include "cpattn/error.h"

namespace cpattn {

std::vector<int64_t> varlen_doc_ids(std::span<const int64_t> cu_seqlens, int64_t total,
                                    const char* name, const char* tensor) {
  CPATTN_CHECK(!cu_seqlens.empty(), ErrorCode::kInvalidArgument, name,
               " must hold D + 1 cumulative lengths of D >= 0 documents, starting at 0; got "
               "none");
  CPATTN_CHECK(cu_seqlens[0] == 0, ErrorCode::kInvalidArgument, name, " must start at 0, got ",
               cu_seqlens[0]);
  for (size_t d = 1; d < cu_seqlens.size(); ++d) {
    CPATTN_CHECK(cu_seqlens[d] >= cu_seqlens[d - 1], ErrorCode::kInvalidArgument, name,
                 " must be non-decreasing, got ", cu_seqlens[d - 1], " then ", cu_seqlens[d],
                 " at entries ", d - 1, " and ", d);
  }
  CPATTN_CHECK(cu_seqlens.back() == total, ErrorCode::kShapeMismatch, name, " ends at ",
               cu_seqlens.back(), " but ", tensor, " has ", total, " tokens");
  std::vector<int64_t> docs;
  docs.reserve(static_cast<size_t>(total));
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    docs.insert(docs.end(), static_cast<size_t>(cu_seqlens[d + 1] - cu_seqlens[d]),
                static_cast<int64_t>(d));
  }
  return docs;
}

VarlenTokens varlen_tokens(std::span<const int64_t> cu_seqlens_q,
                           std::span<const int64_t> cu_seqlens_k, int64_t total_q,
                           int64_t total_k) {
  VarlenTokens t;
  t.q_doc = varlen_doc_ids(cu_seqlens_q, total_q, "cu_seqlens_q", "q");
  t.k_doc = varlen_doc_ids(cu_seqlens_k, total_k, "cu_seqlens_k", "k");
  CPATTN_CHECK(cu_seqlens_q.size() == cu_seqlens_k.size(), ErrorCode::kInvalidArgument,
               "cu_seqlens_q lists ", cu_seqlens_q.size() - 1, " documents but cu_seqlens_k ",
               cu_seqlens_k.size() - 1, " (q and k need the same number)");
  t.q_pos.reserve(static_cast<size_t>(total_q));
  t.k_pos.reserve(static_cast<size_t>(total_k));
  int64_t base = 0;
  for (size_t d = 0; d + 1 < cu_seqlens_q.size(); ++d) {
    const int64_t lq = cu_seqlens_q[d + 1] - cu_seqlens_q[d];
    const int64_t lk = cu_seqlens_k[d + 1] - cu_seqlens_k[d];
    const int64_t span = std::max(lq, lk);
    for (int64_t i = 0; i < lq; ++i) t.q_pos.push_back(base + span - lq + i);
    for (int64_t j = 0; j < lk; ++j) t.k_pos.push_back(base + span - lk + j);
    base += span;
  }
  return t;
}

void check_varlen_max_seqlen(std::span<const int64_t> cu_seqlens_q,
                             std::span<const int64_t> cu_seqlens_k, int64_t max_seqlen_q,
                             int64_t max_seqlen_k) {
  for (size_t d = 0; d + 1 < cu_seqlens_q.size() && d + 1 < cu_seqlens_k.size(); ++d) {
    const int64_t lq = cu_seqlens_q[d + 1] - cu_seqlens_q[d];
    const int64_t lk = cu_seqlens_k[d + 1] - cu_seqlens_k[d];
    CPATTN_CHECK(lq <= max_seqlen_q, ErrorCode::kInvalidArgument, "max_seqlen_q is ", max_seqlen_q,
                 " but document ", d, " has ", lq, " queries");
    CPATTN_CHECK(lk <= max_seqlen_k, ErrorCode::kInvalidArgument, "max_seqlen_k is ", max_seqlen_k,
                 " but document ", d, " has ", lk, " keys");
  }
}

}  // namespace cpattn
