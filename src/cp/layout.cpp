// Sequence layouts (contiguous, zigzag, striped, doc_zigzag) and the shard/unshard helpers of
// layout.h.
#include "cpattn/layout.h"

#include <algorithm>
#include <array>
#include <string>

#include "cpattn/error.h"
#include "cpattn/varlen.h"

namespace cpattn {

const char* layout_name(Layout layout) noexcept {
  switch (layout) {
    case Layout::kContiguous:
      return "contiguous";
    case Layout::kZigzag:
      return "zigzag";
    case Layout::kStriped:
      return "striped";
    case Layout::kDocZigzag:
      return "doc_zigzag";
  }
  return "?";
}

Layout parse_layout(std::string_view name) {
  for (Layout l : kLayouts) {
    if (name == layout_name(l)) return l;
  }
  throw Error(ErrorCode::kInvalidArgument,
              detail::str_cat("layout: expected contiguous | zigzag | striped | doc_zigzag, got ",
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

void check_split(const SequenceSharding& seq, int rank) {
  CPATTN_CHECK(seq.seq_len >= 0, ErrorCode::kInvalidArgument, "seq_len: expected >= 0, got ",
               seq.seq_len);
  CPATTN_CHECK(seq.cp_size >= 1, ErrorCode::kInvalidArgument, "cp_size: expected >= 1, got ",
               seq.cp_size);
  CPATTN_CHECK(rank >= 0 && rank < seq.cp_size, ErrorCode::kInvalidArgument,
               "cp_rank: expected in [0, ", seq.cp_size, "), got ", rank);
  CPATTN_CHECK(seq.docs.empty() || static_cast<int64_t>(seq.docs.size()) == seq.seq_len,
               ErrorCode::kShapeMismatch, "SequenceSharding.docs: expected ", seq.seq_len,
               " entries (or none), got ", seq.docs.size());
}

// ---------------------------------------------------------------------------------------------
// kDocZigzag: the rotation of every document (Layout::kDocZigzag states the rule).

// One document of a doc_zigzag split: tokens [begin, begin + length), rank (rotation + c) mod P
// holding its chunks c and 2P-1-c.
struct PlacedDocument {
  int64_t begin = 0, length = 0;
  int rotation = 0;
};

// Loads and comparison keys in unsigned 128-bit integers: exact while the products and sums fit
// (sequences below 2^31 tokens), saturating beyond, so the keys are a pure function of the
// documents on every machine and nothing overflows. (All keys saturated: rotation 0.)
__extension__ using Key = unsigned __int128;
constexpr Key kKeyMax = ~Key{0};

Key key_add(Key a, Key b) { return a > kKeyMax - b ? kKeyMax : a + b; }
Key key_mul(Key a, Key b) { return a != 0 && b > kKeyMax / a ? kKeyMax : a * b; }

// The chunks c and 2P-1-c of a document of `length` tokens, as offsets in the document.
std::array<TokenRange, 2> slot_chunks(int64_t length, int P, int c) {
  return {chunk_range(length, 2 * int64_t{P}, c),
          chunk_range(length, 2 * int64_t{P}, 2 * P - 1 - c)};
}

// sum over t in [r.begin, r.end) of (t + 1): the causal pairs of those document offsets.
Key causal_pairs(TokenRange r) {
  return key_mul(static_cast<uint64_t>(r.size()), static_cast<uint64_t>(r.begin + r.end + 1)) / 2;
}

std::vector<PlacedDocument> place_documents(const SequenceSharding& seq) {
  const int P = seq.cp_size;
  std::vector<PlacedDocument> placed;
  if (seq.docs.empty()) {
    if (seq.seq_len > 0) placed.push_back({0, seq.seq_len, 0});
    return placed;
  }
  // Loads of the documents placed so far, per rank.
  std::vector<Key> tokens(static_cast<size_t>(P), 0), pairs(static_cast<size_t>(P), 0);
  // What the document gives slot c (chunks c and 2P-1-c), for the slots that get anything.
  std::vector<int> slots;
  std::vector<Key> slot_tokens(static_cast<size_t>(P)), slot_pairs(static_cast<size_t>(P));
  for (int64_t begin = 0; begin < seq.seq_len;) {
    int64_t end = begin + 1;
    while (end < seq.seq_len &&
           seq.docs[static_cast<size_t>(end)] == seq.docs[static_cast<size_t>(begin)]) {
      ++end;
    }
    PlacedDocument doc{begin, end - begin, 0};
    slots.clear();
    for (int c = 0; c < P; ++c) {
      const auto chunks = slot_chunks(doc.length, P, c);
      slot_tokens[static_cast<size_t>(c)] =
          static_cast<uint64_t>(chunks[0].size() + chunks[1].size());
      slot_pairs[static_cast<size_t>(c)] =
          key_add(causal_pairs(chunks[0]), causal_pairs(chunks[1]));
      if (slot_tokens[static_cast<size_t>(c)] > 0) slots.push_back(c);
    }
    // A length that is a multiple of 2P gives every slot the same tokens and causal pairs (the
    // pairs of chunks c and 2P-1-c sum alike), so every rotation ties and 0 wins.
    if (doc.length % (2 * int64_t{P}) != 0) {
      // Loads relative to the least loaded rank: every rotation hands out the same totals, so
      // subtracting a constant keeps the order of the keys and keeps them small.
      const Key t0 = *std::min_element(tokens.begin(), tokens.end());
      const Key c0 = *std::min_element(pairs.begin(), pairs.end());
      Key best_tokens = kKeyMax, best_pairs = kKeyMax;
      for (int o = 0; o < P; ++o) {
        Key kt = 0, kp = 0;
        for (int c : slots) {
          const size_t r = static_cast<size_t>((o + c) % P);
          kt = key_add(kt, key_mul(tokens[r] - t0, slot_tokens[static_cast<size_t>(c)]));
          kp = key_add(kp, key_mul(pairs[r] - c0, slot_pairs[static_cast<size_t>(c)]));
        }
        if (kt < best_tokens || (kt == best_tokens && kp < best_pairs)) {
          best_tokens = kt;
          best_pairs = kp;
          doc.rotation = o;
        }
      }
    }
    for (int c : slots) {
      const size_t r = static_cast<size_t>((doc.rotation + c) % P);
      tokens[r] = key_add(tokens[r], slot_tokens[static_cast<size_t>(c)]);
      pairs[r] = key_add(pairs[r], slot_pairs[static_cast<size_t>(c)]);
    }
    placed.push_back(doc);
    begin = end;
  }
  return placed;
}

// Calls f(TokenRange) for the global token ranges rank `rank` holds, in local order.
template <typename F>
void for_each_range(const SequenceSharding& seq, int rank, F&& f) {
  const int P = seq.cp_size;
  switch (seq.layout) {
    case Layout::kContiguous:
      f(chunk_range(seq.seq_len, P, rank));
      return;
    case Layout::kZigzag:
      f(chunk_range(seq.seq_len, 2 * int64_t{P}, rank));
      f(chunk_range(seq.seq_len, 2 * int64_t{P}, 2 * P - 1 - rank));
      return;
    case Layout::kStriped:
      for (int64_t t = rank; t < seq.seq_len; t += P) f(TokenRange{t, t + 1});
      return;
    case Layout::kDocZigzag:
      for (const PlacedDocument& d : place_documents(seq)) {
        const int c = ((rank - d.rotation) % P + P) % P;
        for (TokenRange r : slot_chunks(d.length, P, c))
          f(TokenRange{d.begin + r.begin, d.begin + r.end});
      }
      return;
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown Layout");
}

}  // namespace

int64_t shard_length(const SequenceSharding& seq, int rank) {
  check_split(seq, rank);
  int64_t n = 0;
  for_each_range(seq, rank, [&n](TokenRange r) { n += r.size(); });
  return n;
}

std::vector<int64_t> shard_token_indices(const SequenceSharding& seq, int rank) {
  check_split(seq, rank);
  std::vector<int64_t> idx;
  for_each_range(seq, rank, [&idx](TokenRange r) {
    for (int64_t t = r.begin; t < r.end; ++t) idx.push_back(t);
  });
  return idx;
}

std::vector<int64_t> shard_values(std::span<const int64_t> global, const SequenceSharding& seq,
                                  int rank) {
  CPATTN_CHECK(static_cast<int64_t>(global.size()) == seq.seq_len, ErrorCode::kShapeMismatch,
               "shard_values: expected one value per token of the sequence (", seq.seq_len,
               "), got ", global.size());
  const auto idx = shard_token_indices(seq, rank);
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

void check_whole_tokens(int64_t tokens, const SequenceSharding& seq, const char* what) {
  CPATTN_CHECK(tokens == seq.seq_len, ErrorCode::kShapeMismatch, what, ": the tensor holds ",
               tokens, " tokens but the sharding's seq_len is ", seq.seq_len);
}

void check_piece_count(size_t pieces, const SequenceSharding& seq, const char* what) {
  CPATTN_CHECK(pieces == static_cast<size_t>(seq.cp_size), ErrorCode::kShapeMismatch, what,
               ": expected one piece per rank (", seq.cp_size, "), got ", pieces);
}

}  // namespace

Tensor shard_tensor(ConstView global, const SequenceSharding& seq, int rank,
                    MemoryCounter* counter) {
  check_whole_tokens(global.shape[1], seq, "shard_tensor");
  const auto idx = shard_token_indices(seq, rank);
  Tensor piece(
      {global.shape[0], static_cast<int64_t>(idx.size()), global.shape[2], global.shape[3]},
      global.dtype, counter);
  copy_rows(global, piece.view(), idx, /*gather=*/true);
  return piece;
}

Tensor unshard_tensor(std::span<const ConstView> pieces, const SequenceSharding& seq,
                      MemoryCounter* counter) {
  check_piece_count(pieces.size(), seq, "unshard_tensor");
  const auto& s0 = pieces[0].shape;
  Tensor whole({s0[0], seq.seq_len, s0[2], s0[3]}, pieces[0].dtype, counter);
  for (int r = 0; r < seq.cp_size; ++r) {
    const auto idx = shard_token_indices(seq, r);
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

Tensor shard_lse(const Tensor& global, const SequenceSharding& seq, int rank,
                 MemoryCounter* counter) {
  const ConstView g = lse_as_view(global);
  check_whole_tokens(g.shape[1], seq, "shard_lse");
  const auto idx = shard_token_indices(seq, rank);
  Tensor piece({g.shape[0], g.shape[2], static_cast<int64_t>(idx.size())}, counter);
  copy_rows(g, lse_as_view(piece), idx, /*gather=*/true);
  return piece;
}

Tensor unshard_lse(std::span<const Tensor> pieces, const SequenceSharding& seq,
                   MemoryCounter* counter) {
  check_piece_count(pieces.size(), seq, "unshard_lse");
  const ConstView first = lse_as_view(pieces[0]);
  Tensor whole({first.shape[0], first.shape[2], seq.seq_len}, counter);
  for (int r = 0; r < seq.cp_size; ++r) {
    const auto idx = shard_token_indices(seq, r);
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
  check_split(*this, cp_rank);
  CPATTN_CHECK(positions.empty() || static_cast<int64_t>(positions.size()) == seq_len,
               ErrorCode::kShapeMismatch, "SequenceSharding.positions: expected ", seq_len,
               " entries (or none), got ", positions.size());
  for (size_t t = 0; t < positions.size(); ++t) {
    CPATTN_CHECK(positions[t] >= 0, ErrorCode::kInvalidArgument,
                 "SequenceSharding.positions: expected >= 0, got ", positions[t], " at token ", t);
  }
}

int64_t SequenceSharding::local_length(int rank) const { return shard_length(*this, rank); }

std::vector<int64_t> SequenceSharding::local_positions(int rank) const {
  if (!positions.empty()) return shard_values(positions, *this, rank);
  return shard_token_indices(*this, rank);
}

std::vector<int64_t> SequenceSharding::local_docs(int rank) const {
  if (docs.empty()) {
    check_split(*this, rank);
    return {};
  }
  return shard_values(docs, *this, rank);
}

VarlenShardings varlen_shardings(Layout layout, std::span<const int64_t> cu_seqlens_q,
                                 std::span<const int64_t> cu_seqlens_k, int64_t total_q,
                                 int64_t total_k, int cp_size, int cp_rank) {
  VarlenTokens t = varlen_tokens(cu_seqlens_q, cu_seqlens_k, total_q, total_k);
  const auto sharding = [&](std::vector<int64_t>& pos, std::vector<int64_t>& doc) {
    SequenceSharding s =
        SequenceSharding::of(layout, static_cast<int64_t>(pos.size()), cp_size, cp_rank);
    bool identity = true;
    for (size_t i = 0; i < pos.size() && identity; ++i) {
      identity = pos[i] == static_cast<int64_t>(i);
    }
    if (!identity) s.positions = std::move(pos);
    s.docs = std::move(doc);
    s.validate();
    return s;
  };
  VarlenShardings out;
  out.q = sharding(t.q_pos, t.q_doc);
  out.kv = sharding(t.k_pos, t.k_doc);
  return out;
}

}  // namespace cpattn
