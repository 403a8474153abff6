// Streaming 64-bit digest (see digest.h). Round and avalanche constants are xxHash64's primes.
#include "cpattn/digest.h"

#include <cstring>
#include <string>

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

Digest& Digest::view(ConstView v) noexcept {
  value(v.shape);
  const auto [B, S, H, D] = v.shape;
  if (v.dtype != DType::kF32) {
    // 16-bit elements: the dtype, then each element's two bytes (fp32 views hash as before).
    value(static_cast<int32_t>(v.dtype));
    const auto* base = reinterpret_cast<const std::byte*>(v.data);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t h = 0; h < H; ++h) {
          if (v.stride[3] == 1 || D <= 1) {
            bytes({base + 2 * v.offset(b, s, h, 0), static_cast<size_t>(2 * D)});
            continue;
          }
          for (int64_t d = 0; d < D; ++d) bytes({base + 2 * v.offset(b, s, h, d), 2});
        }
      }
    }
    return *this;
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        const float* row = &v(b, s, h, 0);
        if (v.stride[3] == 1 || D <= 1) {
          values(std::span<const float>(row, static_cast<size_t>(D)));
        } else {
          for (int64_t d = 0; d < D; ++d) value(row[d * v.stride[3]]);
        }
      }
    }
  }
  return *this;
}

uint64_t Digest::finish() const noexcept { return avalanche(state_ + kPrime3); }

std::string digest_hex(uint64_t digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) s[static_cast<size_t>(i)] = kHex[digest & 15];
  return s;
}

}  // namespace cpattn
