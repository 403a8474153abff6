// Where a call was written: the file and line a checked call reports as its default call site.
#pragma once

#include <cstdint>

namespace cpattn {

/// A caller's source file and line, filled in at the call site by SourceLocation::current() used
/// as a default argument (the compiler builtins std::source_location is made of; this type exists
/// because clang 14 with libstdc++ 12, the fuzzing compiler on Debian 12, has no
/// std::source_location). `file` is a string literal of the compiler's (static storage); `line`
/// counts from 1.
struct SourceLocation {
  const char* file = "";
  uint32_t line = 0;

  /// The location of the expression that calls current(): as a default argument, the caller's.
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          uint32_t line = __builtin_LINE()) noexcept {
    return {file, line};
  }
};

}  // namespace cpattn
