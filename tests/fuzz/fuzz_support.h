// What every fuzz target shares: reading typed values off the input, and the one rule for the
// exceptions a parser of outside input may throw.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "cpattn/error.h"

namespace cpattn::fuzz {

/// The input, consumed front to back; reads past its end give zeros (so every input is valid).
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T take() {
    T v{};
    const size_t n = std::min(sizeof v, size_ - at_);
    if (n > 0) std::memcpy(&v, data_ + at_, n);
    at_ += n;
    return v;
  }
  /// An integer in [lo, hi].
  int64_t take_in(int64_t lo, int64_t hi) {
    const auto range = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(range == 0 ? take<uint64_t>() : take<uint64_t>() % range);
  }
  /// The rest of the input as bytes.
  std::span<const std::byte> rest() {
    const auto* p = reinterpret_cast<const std::byte*>(data_ + at_);
    const size_t n = size_ - at_;
    at_ = size_;
    return {p, n};
  }
  size_t remaining() const { return size_ - at_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

/// A parser refuses bad input with cpattn::Error of an expected code and a one-line message;
/// anything else (another exception, another code, an empty or multi-line message) is a bug,
/// reported and aborted on so that the fuzzer keeps the input.
template <typename Fn>
void expect_clean_refusal(Fn&& fn, std::initializer_list<ErrorCode> codes) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string_view what = e.what();
    bool expected = false;
    for (const ErrorCode c : codes) expected = expected || e.code() == c;
    if (expected && !what.empty() && what.find('\n') == std::string_view::npos) return;
    std::fprintf(stderr, "fuzz: unexpected refusal (%s): %s\n", error_code_name(e.code()),
                 e.what());
    std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception that is not cpattn::Error: %s\n", e.what());
    std::abort();
  }
}

/// Aborts with `what` when `ok` is false: a property of a parser's result that failed.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: property failed: %s\n", what);
  std::abort();
}

}  // namespace cpattn::fuzz
