// Streaming 64-bit digest (see digest.h). Round and avalanche constants are xxHash64's primes.
#include "cpattn/digest.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace cpattn {

namespace {
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;

constexpr uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr uint64_t round(uint64_t acc, uint64_t word) {
  return rotl(acc + word * kPrime2, 31) * kPrime1;
}
constexpr uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  return h ^ (h >> 32);
}
uint64_t load64(const std::byte* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
}  // namespace

Digest& Digest::bytes(std::span<const std::byte> data) noexcept {
  const std::byte* p = data.data();
  const size_t n = data.size();
  // Four lanes break the multiply latency chain: 4 independent rounds in flight per 32 bytes.
  uint64_t lane[4] = {state_ + kPrime1, state_ ^ kPrime2, state_, state_ - kPrime1};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; ++l) lane[l] = round(lane[l], load64(p + i + 8 * l));
  }
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  for (; i + 8 <= n; i += 8) h = rotl(h ^ round(0, load64(p + i)), 27) * kPrime1 + kPrime3;
  for (; i < n; ++i) h = rotl(h ^ (static_cast<uint64_t>(p[i]) * kPrime1), 11) * kPrime2;
  state_ = avalanche(h ^ (static_cast<uint64_t>(n) * kPrime3));
  return *this;
}

namespace {

// A row's digest: its bytes in chunks of at most kRowChunk, fed to one Digest in order. A row
// whose elements are not adjacent is gathered chunk by chunk into a buffer first, so it digests
// as its dense copy does.
constexpr size_t kRowChunk = 1024;

uint64_t row_digest(const std::byte* row, int64_t n, int64_t stride_bytes, size_t elem) {
  Digest d;
  const size_t bytes = static_cast<size_t>(n) * elem;
  if (n <= 1 || stride_bytes == static_cast<int64_t>(elem)) {
    for (size_t at = 0; at < bytes; at += kRowChunk) {
      d.bytes({row + at, std::min(kRowChunk, bytes - at)});
    }
    return d.finish();
  }
  std::byte chunk[kRowChunk];
  const int64_t per_chunk = static_cast<int64_t>(kRowChunk / elem);
  for (int64_t i0 = 0; i0 < n; i0 += per_chunk) {
    const int64_t count = std::min(per_chunk, n - i0);
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(chunk + static_cast<size_t>(i) * elem, row + (i0 + i) * stride_bytes, elem);
    }
    d.bytes({chunk, static_cast<size_t>(count) * elem});
  }
  return d.finish();
}

// Rows [first, last) of v in (b, s, h) order: the sum of avalanche(row digest ^ index * kPrime1)
// (2^64 wrap-around), which does not depend on how the rows are split or in which order.
uint64_t rows_sum(const ConstView& v, int64_t first, int64_t last) {
  const auto [B, S, H, D] = v.shape;
  const size_t elem = dtype_size(v.dtype);
  const auto* base = reinterpret_cast<const std::byte*>(v.data);
  const int64_t stride_bytes = v.stride[3] * static_cast<int64_t>(elem);
  if (first >= last) return 0;  // (S or H may be 0: no division then)
  uint64_t sum = 0;
  int64_t h = first % H, s = first / H % S, b = first / H / S;
  for (int64_t r = first; r < last; ++r) {
    const std::byte* row = base + v.offset(b, s, h, 0) * static_cast<int64_t>(elem);
    sum += avalanche(row_digest(row, D, stride_bytes, elem) ^ (static_cast<uint64_t>(r) * kPrime1));
    if (++h == H) {
      h = 0;
      if (++s == S) s = 0, ++b;
    }
  }
  return sum;
}

}  // namespace

Digest& Digest::view(ConstView v, int num_threads) noexcept {
  value(v.shape);
  // The dtype of 16-bit views: an fp16 and a bf16 view of the same bits differ.
  if (v.dtype != DType::kF32) value(static_cast<int32_t>(v.dtype));
  const auto [B, S, H, D] = v.shape;
  const int64_t rows = D > 0 ? B * S * H : 0;
  const int64_t mib = rows * D * static_cast<int64_t>(dtype_size(v.dtype)) >> 20;
  // At most one worker per MiB (starting a thread costs about what digesting 1 MiB takes).
  constexpr int64_t kMaxWorkers = 64;
  const int64_t workers = std::clamp<int64_t>(std::min<int64_t>(num_threads, mib), 1, kMaxWorkers);
  std::array<uint64_t, kMaxWorkers> sums{};
  const auto part = [&](int64_t w) {
    sums[static_cast<size_t>(w)] = rows_sum(v, rows * w / workers, rows * (w + 1) / workers);
  };
  std::vector<std::thread> threads;
  int64_t started = 1;
  try {
    threads.reserve(static_cast<size_t>(workers - 1));
    for (; started < workers; ++started) threads.emplace_back(part, started);
  } catch (...) {
    // Out of threads or memory: the parts that did not start run on this thread.
  }
  part(0);
  for (int64_t w = started; w < workers; ++w) part(w);
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (const uint64_t x : sums) total += x;
  return value(total);
}

uint64_t Digest::finish() const noexcept { return avalanche(state_ + kPrime3); }

std::string digest_hex(uint64_t digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) s[static_cast<size_t>(i)] = kHex[digest & 15];
  return s;
}

}  // namespace cpattn
