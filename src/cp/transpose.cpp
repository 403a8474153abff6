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
    index.push_back(shard_token_indices(seq, m));
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

// The rank's own block, straight from `from` to `to` without staging: rows from_rows[j] of
// from's heads `from_heads` to rows to_rows[j] of to's heads from `to_head` on (adding when
// `add`), the element order pack and unpack would give.
void move_rows(ConstView from, std::span<const int64_t> from_rows, HeadRange from_heads, View to,
               std::span<const int64_t> to_rows, int64_t to_head, bool add) {
  const int64_t D = from.shape[3], sf = from.stride[3], st = to.stride[3];
  if (D == 0) return;
  for (size_t j = 0; j < from_rows.size(); ++j)
    for (int64_t b = 0; b < from.shape[0]; ++b)
      for (int64_t h = 0; h < from_heads.count; ++h) {
        const float* src = &from(b, from_rows[j], from_heads.begin + h, 0);
        float* dst = &to(b, to_rows[j], to_head + h, 0);
        if (sf == 1 && st == 1 && !add) {
          std::copy_n(src, D, dst);
        } else {
          for (int64_t d = 0; d < D; ++d) {
            dst[d * st] = add ? dst[d * st] + src[d * sf] : src[d * sf];
          }
        }
      }
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

void to_heads(CpChannel& channel, WorkspaceLease& lease, int rank, int world, int phase,
              std::span<const HeadPart> parts) {
  // The own block (c == rank) moves straight across (move_rows); only the others are staged.
  std::vector<int64_t> send_sizes(static_cast<size_t>(world), 0), recv_sizes(send_sizes);
  for (const HeadPart& p : parts) {
    for (int c = 0; c < world; ++c) {
      if (c == rank) continue;
      send_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, rank), p.heads[static_cast<size_t>(c)]);
      recv_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, c), p.heads[static_cast<size_t>(rank)]);
    }
  }
  const bool same = broadcast(parts) && world > 1;
  const int first_peer = rank == 0 ? 1 : 0;
  std::vector<int64_t> packed_sizes =
      same ? std::vector<int64_t>{send_sizes[static_cast<size_t>(first_peer)]} : send_sizes;
  const std::span<float> send = lease.get(WorkspaceBuffer::kStageSend, total(packed_sizes));
  const std::span<float> recv = lease.get(WorkspaceBuffer::kStageRecv, total(recv_sizes));
  {
    float* dst = send.data();
    for (int c = 0; c < (same ? 1 : world); ++c) {
      const int peer = same ? first_peer : c;
      if (peer == rank) continue;
      for (const HeadPart& p : parts) {
        dst = pack(p.from, identity(len_of(p, rank)), p.heads[static_cast<size_t>(peer)], dst);
      }
    }
  }
  std::vector<std::span<const float>> send_blocks = cut(std::span<const float>(send), packed_sizes);
  if (same) {
    const std::span<const float> block = send_blocks[0];
    send_blocks.assign(static_cast<size_t>(world), block);
    send_blocks[static_cast<size_t>(rank)] = {};
  }
  const std::vector<std::span<float>> recv_blocks = cut(recv, recv_sizes);
  exchange(channel, rank, world, TagStream::kHeadsIn, phase, send_blocks, recv_blocks,
           "heads exchange: bytes of a block");
  const float* src = recv.data();
  for (int m = 0; m < world; ++m) {
    for (const HeadPart& p : parts) {
      const HeadRange& mine = p.heads[static_cast<size_t>(rank)];
      const std::vector<int64_t>& rows = p.tokens->rows[static_cast<size_t>(m)];
      if (m == rank) {
        move_rows(p.from, identity(len_of(p, rank)), mine, p.to, rows, 0, false);
      } else {
        src = unpack(src, rows, {0, mine.count}, p.to, false);
      }
    }
  }
  lease.done({WorkspaceBuffer::kStageSend, WorkspaceBuffer::kStageRecv});
}

void to_sequence(CpChannel& channel, WorkspaceLease& lease, int rank, int world, int phase,
                 std::span<const HeadPart> parts) {
  // The own block (c == rank) moves straight across (move_rows); only the others are staged.
  std::vector<int64_t> send_sizes(static_cast<size_t>(world), 0), recv_sizes(send_sizes);
  for (const HeadPart& p : parts) {
    for (int c = 0; c < world; ++c) {
      if (c == rank) continue;
      send_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, c), p.heads[static_cast<size_t>(rank)]);
      recv_sizes[static_cast<size_t>(c)] +=
          block_floats(p, len_of(p, rank), p.heads[static_cast<size_t>(c)]);
    }
  }
  const std::span<float> send = lease.get(WorkspaceBuffer::kStageSend, total(send_sizes));
  const std::span<float> recv = lease.get(WorkspaceBuffer::kStageRecv, total(recv_sizes));
  {
    float* dst = send.data();
    for (int c = 0; c < world; ++c) {
      if (c == rank) continue;
      for (const HeadPart& p : parts) {
        const HeadRange mine{0, p.heads[static_cast<size_t>(rank)].count};
        dst = pack(p.from, p.tokens->rows[static_cast<size_t>(c)], mine, dst);
      }
    }
  }
  exchange(channel, rank, world, TagStream::kHeadsOut, phase,
           cut(std::span<const float>(send), send_sizes), cut(recv, recv_sizes),
           "heads exchange: bytes of a block");
  for (const HeadPart& p : parts) {
    if (p.sum) zero_view(p.to);
  }
  // Blocks are added in rank order, so sums are ((x_0 + x_1) + x_2) + ... on every rank.
  const float* src = recv.data();
  for (int c = 0; c < world; ++c) {
    for (const HeadPart& p : parts) {
      const HeadRange& theirs = p.heads[static_cast<size_t>(c)];
      const std::vector<int64_t> own = identity(len_of(p, rank));
      if (c == rank) {
        move_rows(p.from, p.tokens->rows[static_cast<size_t>(rank)], {0, theirs.count}, p.to, own,
                  theirs.begin, p.sum);
      } else {
        src = unpack(src, own, theirs, p.to, p.sum);
      }
    }
  }
  lease.done({WorkspaceBuffer::kStageSend, WorkspaceBuffer::kStageRecv});
}

}  // namespace cpattn::detail
