// Sequence layouts (contiguous, zigzag, striped) and the shard/unshard helpers of layout.h.
#include "cpattn/layout.h"

#include <cstring>
#include <string>

#include "cpattn/error.h"

namespace cpattn {

const char* layout_name(Layout layout) noexcept {
  switch (layout) {
    case Layout::kContiguous:
      return "contiguous";
    case Layout::kZigzag:
      return "zigzag";
    case Layout::kStriped:
      return "striped";
  }
  return "?";
}

Layout parse_layout(std::string_view name) {
  for (Layout l : {Layout::kContiguous, Layout::kZigzag, Layout::kStriped}) {
    if (name == layout_name(l)) return l;
  }
  throw Error(ErrorCode::kInvalidArgument,
              detail::str_cat("layout: expected contiguous | zigzag | striped, got ",
                              detail::quoted(name)));
}

TokenRange chunk_range(int64_t length, int64_t num_chunks, int64_t chunk) {
  CPATTN_CHECK(length >= 0 && num_chunks >= 1 && chunk >= 0 && chunk < num_chunks,
               ErrorCode::kInvalidArgument, "chunk_range: expected length >= 0 and 0 <= chunk < ",
               "num_chunks, got length ", length, ", chunk ", chunk, " of ", num_chunks);
  const int64_t base = length / num_chunks;
  const int64_t extra = length % num_chunks;
  // The first `extra` chunks hold base + 1 tokens.
  const int64_t begin = chunk * base + (chunk < extra ? chunk : extra);
  return {begin, begin + base + (chunk < extra ? 1 : 0)};
}

namespace {

void check_shard_args(int64_t seq_len, int cp_size, int rank) {
  CPATTN_CHECK(seq_len >= 0, ErrorCode::kInvalidArgument, "seq_len: expected >= 0, got ", seq_len);
  CPATTN_CHECK(cp_size >= 1, ErrorCode::kInvalidArgument, "cp_size: expected >= 1, got ", cp_size);
  CPATTN_CHECK(rank >= 0 && rank < cp_size, ErrorCode::kInvalidArgument,
               "cp_rank: expected in [0, ", cp_size, "), got ", rank);
}

}  // namespace

int64_t shard_length(Layout layout, int64_t seq_len, int cp_size, int rank) {
  check_shard_args(seq_len, cp_size, rank);
  switch (layout) {
    case Layout::kContiguous:
      return chunk_range(seq_len, cp_size, rank).size();
    case Layout::kZigzag:
      return chunk_range(seq_len, 2 * cp_size, rank).size() +
             chunk_range(seq_len, 2 * cp_size, 2 * cp_size - 1 - rank).size();
    case Layout::kStriped:
      return seq_len > rank ? (seq_len - rank + cp_size - 1) / cp_size : 0;
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown Layout");
}

std::vector<int64_t> shard_token_indices(Layout layout, int64_t seq_len, int cp_size, int rank) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(shard_length(layout, seq_len, cp_size, rank)));
  auto append = [&idx](TokenRange r) {
    for (int64_t t = r.begin; t < r.end; ++t) idx.push_back(t);
  };
  switch (layout) {
    case Layout::kContiguous:
      append(chunk_range(seq_len, cp_size, rank));
      break;
    case Layout::kZigzag:
      append(chunk_range(seq_len, 2 * cp_size, rank));
      append(chunk_range(seq_len, 2 * cp_size, 2 * cp_size - 1 - rank));
      break;
    case Layout::kStriped:
      for (int64_t t = rank; t < seq_len; t += cp_size) idx.push_back(t);
      break;
  }
  return idx;
}

std::vector<int64_t> shard_values(std::span<const int64_t> global, Layout layout, int cp_size,
                                  int rank) {
  const auto idx = shard_token_indices(layout, static_cast<int64_t>(global.size()), cp_size, rank);
  std::vector<int64_t> out(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) out[i] = global[static_cast<size_t>(idx[i])];
  return out;
}

namespace {

// Copies rows of a strided [B, S, H, D] view: dst(b, i) = src(b, map[i]) (gather) or
// dst(b, map[i]) = src(b, i) (scatter). Rows are whole [H, D] slices. Both views have one dtype
// (exact element copies).
void copy_rows(ConstView src, View dst, const std::vector<int64_t>& map, bool gather) {
  const auto& sh = gather ? dst.shape : src.shape;
  for (int64_t b = 0; b < sh[0]; ++b) {
    for (int64_t i = 0; i < sh[1]; ++i) {
      const int64_t si = gather ? map[static_cast<size_t>(i)] : i;
      const int64_t di = gather ? i : map[static_cast<size_t>(i)];
      for (int64_t h = 0; h < sh[2]; ++h) {
        for (int64_t d = 0; d < sh[3]; ++d) {
          if (src.dtype == DType::kF32 && dst.dtype == DType::kF32) {
            dst(b, di, h, d) = src(b, si, h, d);
          } else {
            write_element(dst, b, di, h, d, read_element(src, b, si, h, d));
          }
        }
      }
    }
  }
}

}  // namespace

Tensor shard_tensor(ConstView global, Layout layout, int cp_size, int rank,
                    MemoryCounter* counter) {
  const auto idx = shard_token_indices(layout, global.shape[1], cp_size, rank);
  Tensor piece(
      {global.shape[0], static_cast<int64_t>(idx.size()), global.shape[2], global.shape[3]},
      global.dtype, counter);
  copy_rows(global, piece.view(), idx, /*gather=*/true);
  return piece;
}

Tensor unshard_tensor(std::span<const ConstView> pieces, Layout layout, int64_t seq_len,
                      MemoryCounter* counter) {
  CPATTN_CHECK(!pieces.empty(), ErrorCode::kShapeMismatch,
               "unshard_tensor: expected one piece per rank, got none");
  const int cp_size = static_cast<int>(pieces.size());
  const auto& s0 = pieces[0].shape;
  Tensor whole({s0[0], seq_len, s0[2], s0[3]}, pieces[0].dtype, counter);
  for (int r = 0; r < cp_size; ++r) {
    const auto idx = shard_token_indices(layout, seq_len, cp_size, r);
    const std::array<int64_t, 4> want{s0[0], static_cast<int64_t>(idx.size()), s0[2], s0[3]};
    const auto& got = pieces[static_cast<size_t>(r)].shape;
    CPATTN_CHECK(got == want, ErrorCode::kShapeMismatch, "unshard_tensor: piece ", r,
                 " expected shape [", want[0], ", ", want[1], ", ", want[2], ", ", want[3],
                 "], got [", got[0], ", ", got[1], ", ", got[2], ", ", got[3], "]");
    copy_rows(pieces[static_cast<size_t>(r)], whole.view(), idx, /*gather=*/false);
  }
  return whole;
}

namespace {

// An lse tensor [B, H, S] seen as a [B, S, H, 1] view so copy_rows can move its tokens.
ConstView lse_as_view(const Tensor& t) {
  CPATTN_CHECK(t.shape().size() == 3, ErrorCode::kShapeMismatch,
               "lse: expected rank 3 [B, H, S], got ", t.shape_string());
  const int64_t h = t.dim(1), s = t.dim(2);
  return {t.data(), {t.dim(0), s, h, 1}, {h * s, 1, s, 1}};
}
View lse_as_view(Tensor& t) {
  const ConstView v = lse_as_view(static_cast<const Tensor&>(t));
  return {t.data(), v.shape, v.stride};
}

}  // namespace

Tensor shard_lse(const Tensor& global, Layout layout, int cp_size, int rank,
                 MemoryCounter* counter) {
  const ConstView g = lse_as_view(global);
  const auto idx = shard_token_indices(layout, g.shape[1], cp_size, rank);
  Tensor piece({g.shape[0], g.shape[2], static_cast<int64_t>(idx.size())}, counter);
  copy_rows(g, lse_as_view(piece), idx, /*gather=*/true);
  return piece;
}

Tensor unshard_lse(std::span<const Tensor> pieces, Layout layout, int64_t seq_len,
                   MemoryCounter* counter) {
  CPATTN_CHECK(!pieces.empty(), ErrorCode::kShapeMismatch,
               "unshard_lse: expected one piece per rank, got none");
  const int cp_size = static_cast<int>(pieces.size());
  const ConstView first = lse_as_view(pieces[0]);
  Tensor whole({first.shape[0], first.shape[2], seq_len}, counter);
  for (int r = 0; r < cp_size; ++r) {
    const auto idx = shard_token_indices(layout, seq_len, cp_size, r);
    const ConstView p = lse_as_view(pieces[static_cast<size_t>(r)]);
    CPATTN_CHECK(p.shape[0] == first.shape[0] && p.shape[2] == first.shape[2] &&
                     p.shape[1] == static_cast<int64_t>(idx.size()),
                 ErrorCode::kShapeMismatch, "unshard_lse: piece ", r, " expected shape [",
                 first.shape[0], ", ", first.shape[2], ", ", idx.size(), "], got ",
                 pieces[static_cast<size_t>(r)].shape_string());
    copy_rows(p, lse_as_view(whole), idx, /*gather=*/false);
  }
  return whole;
}

void SequenceSharding::validate() const {
  check_shard_args(seq_len, cp_size, cp_rank);
  CPATTN_CHECK(positions.empty() || static_cast<int64_t>(positions.size()) == seq_len,
               ErrorCode::kShapeMismatch, "SequenceSharding.positions: expected ", seq_len,
               " entries (or none), got ", positions.size());
  CPATTN_CHECK(docs.empty() || static_cast<int64_t>(docs.size()) == seq_len,
               ErrorCode::kShapeMismatch, "SequenceSharding.docs: expected ", seq_len,
               " entries (or none), got ", docs.size());
  for (size_t t = 0; t < positions.size(); ++t) {
    CPATTN_CHECK(positions[t] >= 0, ErrorCode::kInvalidArgument,
                 "SequenceSharding.positions: expected >= 0, got ", positions[t], " at token ", t);
  }
}

std::vector<int64_t> SequenceSharding::local_positions(int rank) const {
  if (!positions.empty()) return shard_values(positions, layout, cp_size, rank);
  return shard_token_indices(layout, seq_len, cp_size, rank);
}

std::vector<int64_t> SequenceSharding::local_docs(int rank) const {
  if (docs.empty()) {
    check_shard_args(seq_len, cp_size, rank);
    return {};
  }
  return shard_values(docs, layout, cp_size, rank);
}

}  // namespace cpattn
