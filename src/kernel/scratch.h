// The layout of a kernel worker's scratch buffer: one object yields both the buffer's size and
// the offset of every array carved from it, so the two can never disagree.
#pragma once

#include <cstdint>

namespace cpattn::detail {

/// Reserves named arrays in one buffer of floats, in order. Every array starts on a 64-byte line
/// (16 floats) when the buffer does (Tensor storage is 64-byte aligned).
class ScratchLayout {
 public:
  /// Reserves `floats` floats; returns the array's offset in the buffer.
  int64_t add(int64_t floats) {
    const int64_t at = total_;
    total_ += (floats + kLineFloats - 1) / kLineFloats * kLineFloats;
    return at;
  }
  /// Floats the buffer must hold.
  int64_t total() const { return total_; }

 private:
  static constexpr int64_t kLineFloats = 16;
  int64_t total_ = 0;
};

}  // namespace cpattn::detail
