// Sequence side <-> head side transpositions (transpose.h).
#include "cp/transpose.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "cp/exchange.h"
#include "cpattn/error.h"

namespace cpattn::detail {

TokenUnion token_union(const SequenceSharding& seq, std::span<const int> members) {
  // Global token index of every member's tokens, then the union sorted by it.
  std::vector<std::vector<int64_t>> index;
  index.reserve(members.size());
  std::vector<int64_t> all;
  for (int m : members) {
    index.push_back(shard_token_indices(seq.layout, seq.seq_len, seq.cp_size, m));
    all.insert(all.end(), index.back().begin(), index.back().end());
  }
  std::sort(all.begin(), all.end());
  TokenUnion u;
  u.pos.resize(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    u.pos[i] = seq.positions.empty() ? all[i] : seq.positions[static_cast<size_t>(all[i])];
  }
  if (!seq.docs.empty()) {
    u.doc.resize(all.size());
    for (size_t i = 0; i < all.size(); ++i) u.doc[i] = seq.docs[static_cast<size_t>(all[i])];
  }
  for (const std::vector<int64_t>& idx : index) {
    std::vector<int64_t>& rows = u.rows.emplace_back(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) {
      rows[i] = std::lower_bound(all.begin(), all.end(), idx[i]) - all.begin();
    }
  }
  return u;
}

HeadSplit::HeadSplit(int64_t Hq, int64_t Hkv, int parts, const char* what)
    : hq_(Hq), hkv_(Hkv), n_(parts) {
  CPATTN_CHECK(parts >= 1 && Hkv >= 1 && Hq % parts == 0, ErrorCode::kInvalidArgument, what,
               ": the query heads are split over the ranks, so Hq must be a multiple of ", parts,
               ", got Hq = ", Hq);
  CPATTN_CHECK(Hkv % parts == 0 || parts % Hkv == 0, ErrorCode::kInvalidArgument, what,
               ": kv heads are sharded (Hkv a multiple of ", parts, ") or replicated (", parts,
               " a multiple of Hkv), got Hkv = ", Hkv);
}

HeadRange HeadSplit::kv(int c) const {
  if (hkv_ % n_ == 0) return {c * (hkv_ / n_), hkv_ / n_};
  return {q(c).begin / (hq_ / hkv_), 1};  // the kv head of the rank's query heads
}

std::vector<HeadRange> HeadSplit::q_all() const {
  std::vector<HeadRange> r;
  for (int c = 0; c < n_; ++c) r.push_back(q(c));
  return r;
}

std::vector<HeadRange> HeadSplit::kv_all() const {
  std::vector<HeadRange> r;
  for (int c = 0; c < n_; ++c) r.push_back(kv(c));
  return r;
}

View rows_view(std::span<float> x, int64_t B, int64_t H, int64_t S) {
  return {x.data(), {B, S, H, 1}, {H * S, 1, S, 1}};
}
ConstView rows_view(std::span<const float> x, int64_t B, int64_t H, int64_t S) {
  return {x.data(), {B, S, H, 1}, {H * S, 1, S, 1}};
}

namespace {

int64_t len_of(const HeadPart& p, int member) {
  return static_cast<int64_t>(p.tokens->rows[static_cast<size_t>(member)].size());
}

// Floats of one part's block for `tokens` tokens of `heads` heads.
int64_t block_floats(const HeadPart& p, int64_t tokens, const HeadRange& heads) {
  return tokens * p.from.shape[0] * heads.count * p.from.shape[3];
}

// Copies rows (b, i, heads) of v, token-major ([i][b][h][d]), into dst; returns the end. A row of
// D elements with unit stride (every dense layout) is one block copy.
float* pack(ConstView v, std::span<const int64_t> rows, HeadRange heads, float* dst) {
  const int64_t D = v.shape[3], sd = v.stride[3];
  for (const int64_t i : rows)
    for (int64_t b = 0; b < v.shape[0]; ++b)
      for (int64_t h = heads.begin; h < heads.begin + heads.count; ++h) {
        if (D == 0) continue;
        const float* row = &v(b, i, h, 0);
        if (sd == 1) {
          dst = std::copy_n(row, D, dst);
        } else {
          for (int64_t d = 0; d < D; ++d) *dst++ = row[d * sd];
        }
      }
  return dst;
}

// The inverse of pack into v at rows (b, i, heads); adds instead of assigning when `add`.
const float* unpack(const float* src, std::span<const int64_t> rows, HeadRange heads, View v,
                    bool add) {
  const int64_t D = v.shape[3], sd = v.stride[3];
  for (const int64_t i : rows)
    for (int64_t b = 0; b < v.shape[0]; ++b)
      for (int64_t h = heads.begin; h < heads.begin + heads.count; ++h, src += D) {
        if (D == 0) continue;
        float* row = &v(b, i, h, 0);
        if (sd == 1 && !add) {
          std::copy_n(src, D, row);
        } else if (sd == 1) {
          for (int64_t d = 0; d < D; ++d) row[d] += src[d];
        } else {
          for (int64_t d = 0; d < D; ++d) row[d * sd] = add ? row[d * sd] + src[d] : src[d];
        }
      }
  return src;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), int64_t{0});
  return r;
}

}  // namespace

namespace {

// Cuts `buffer` into consecutive blocks of the given sizes.
template <typename T>
std::vector<std::span<T>> cut(std::span<T> buffer, const std::vector<int64_t>& sizes) {
  std::vector<std::span<T>> blocks;
  size_t at = 0;
  for (const int64_t n : sizes) {
    blocks.push_back(buffer.subspan(at, static_cast<size_t>(n)));
    at += static_cast<size_t>(n);
  }
  return blocks;
}

int64_t total(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
}

// Every rank gets the same heads of every part (the allgather): one packed block serves all.
bool broadcast(std::span<const HeadPart> parts) {
  for (const HeadPart& p : parts) {
    for (const HeadRange& h : p.heads) {
      if (h.begin != p.heads[0].begin || h.count != p.heads[0].count) return false;
    }
  }
  return true;
}

}  // namespace

void to_heads(RingChannel& channel, int rank, int world, int phase,
              std::span<const HeadPart> parts) {
  std::vector<int64_t> send_sizes(static_cast<size_t>(world), 0), recv_sizes(send_sizes);
  for (const HeadPart& p : parts) {
    for (int c = 0; c < world; ++c) {
      send_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, rank), p.heads[static_cast<size_t>(c)]);
      recv_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, c), p.heads[static_cast<size_t>(rank)]);
    }
  }
  MemoryCounter* mem = &channel.memory();
  const bool same = broadcast(parts);
  std::vector<int64_t> packed_sizes = same ? std::vector<int64_t>{send_sizes[0]} : send_sizes;
  Tensor send({total(packed_sizes)}, mem);
  Tensor recv({total(recv_sizes)}, mem);
  {
    float* dst = send.data();
    for (int c = 0; c < (same ? 1 : world); ++c) {
      for (const HeadPart& p : parts) {
        dst = pack(p.from, identity(len_of(p, rank)), p.heads[static_cast<size_t>(c)], dst);
      }
    }
  }
  std::vector<std::span<const float>> send_blocks = cut(std::as_const(send).span(), packed_sizes);
  if (same) send_blocks.assign(static_cast<size_t>(world), send_blocks[0]);
  const std::vector<std::span<float>> recv_blocks = cut(recv.span(), recv_sizes);
  exchange(channel, rank, world, RingStream::kHeadsIn, phase, send_blocks, recv_blocks,
           "heads exchange: floats of a block");
  const float* src = recv.data();
  for (int m = 0; m < world; ++m) {
    for (const HeadPart& p : parts) {
      const HeadRange mine{0, p.heads[static_cast<size_t>(rank)].count};
      src = unpack(src, p.tokens->rows[static_cast<size_t>(m)], mine, p.to, false);
    }
  }
}

void to_sequence(RingChannel& channel, int rank, int world, int phase,
                 std::span<const HeadPart> parts) {
  std::vector<int64_t> send_sizes(static_cast<size_t>(world), 0), recv_sizes(send_sizes);
  for (const HeadPart& p : parts) {
    for (int c = 0; c < world; ++c) {
      send_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, c), p.heads[static_cast<size_t>(rank)]);
      recv_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, rank), p.heads[static_cast<size_t>(c)]);
    }
  }
  MemoryCounter* mem = &channel.memory();
  Tensor send({total(send_sizes)}, mem);
  Tensor recv({total(recv_sizes)}, mem);
  {
    float* dst = send.data();
    for (int c = 0; c < world; ++c) {
      for (const HeadPart& p : parts) {
        const HeadRange mine{0, p.heads[static_cast<size_t>(rank)].count};
        dst = pack(p.from, p.tokens->rows[static_cast<size_t>(c)], mine, dst);
      }
    }
  }
  exchange(channel, rank, world, RingStream::kHeadsOut, phase,
           cut(std::as_const(send).span(), send_sizes), cut(recv.span(), recv_sizes),
           "heads exchange: floats of a block");
  for (const HeadPart& p : parts) {
    if (p.sum) zero_view(p.to);
  }
  // Blocks arrive in rank order, so sums are ((x_0 + x_1) + x_2) + ... on every rank.
  const float* src = recv.data();
  for (int c = 0; c < world; ++c) {
    for (const HeadPart& p : parts) {
      src = unpack(src, identity(len_of(p, rank)), p.heads[static_cast<size_t>(c)], p.to, p.sum);
    }
  }
}

}  // namespace cpattn::detail
