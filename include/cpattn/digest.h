// Fast 64-bit content digests, used to fingerprint forward state (positions, inputs, outputs) so
// backward and recompute can prove they see what the first forward saw. Not cryptographic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "cpattn/tensor.h"

namespace cpattn {

/// A streaming digest: feed it buffers and values in order, read finish(). Equal inputs fed in
/// the same order give equal digests; any change of a byte, a length or the order changes the
/// digest (up to a ~2^-64 collision chance). Each update hashes 8-byte words on four independent
/// lanes (multiply-rotate-multiply, as in xxHash64's round) so it runs near memory bandwidth.
class Digest {
 public:
  Digest& bytes(std::span<const std::byte> data) noexcept;
  template <typename T>
  Digest& values(std::span<const T> data) noexcept {
    static_assert(std::is_trivially_copyable_v<T>);
    return bytes(std::as_bytes(data));
  }
  template <typename T>
  Digest& value(const T& v) noexcept {
    return values(std::span<const T>(&v, 1));
  }
  Digest& string(std::string_view s) noexcept {
    return values(std::span<const char>(s.data(), s.size()));
  }
  /// Every element of a strided [B, S, H, D] view, plus its shape (and a 16-bit view's dtype): a
  /// view and its dense copy digest alike, whatever the strides. Each row (the D elements of one
  /// (b, s, h)) is digested on its own and keyed by its index in (b, s, h) order; the view adds
  /// the rows' sum, which does not depend on how the rows are split: the rows are split over up
  /// to `num_threads` threads (std::thread), at most one per MiB of the view and fewer if
  /// threads cannot start, with the same result.
  Digest& view(ConstView v, int num_threads = 1) noexcept;
  uint64_t finish() const noexcept;

 private:
  uint64_t state_ = 0x9E3779B97F4A7C15ull;
};

/// 16 lower-case hex digits, e.g. "0123456789abcdef".
std::string digest_hex(uint64_t digest);

}  // namespace cpattn
