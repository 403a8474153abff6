// cpattn::Error, the one exception type of the public API, and the always-on check macros that
// build its messages ("what: expected X, got Y").
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cpattn {

/// Why a cpattn call failed. The CLI maps each code to a distinct non-zero exit status.
enum class ErrorCode {
  kInvalidArgument = 1,    ///< a precondition on a value (range, NaN, flag combination)
  kShapeMismatch = 2,      ///< a tensor's shape, stride or a span's length is not what was required
  kStateMismatch = 3,      ///< a ForwardResult does not belong to this backward call
  kRecomputeDiverged = 4,  ///< a recomputed forward differs from the recorded one
  kTimeout = 5,            ///< a communication wait passed its deadline
  kPeerFailed = 6,         ///< another rank of the group failed
  kCommunication = 7,      ///< a transport error (MPI error code, truncated message, ...)
  kIo = 8,                 ///< a file could not be read or written
  kInternal = 9,           ///< a bug in cpattn: please report it
  kRankDisagreement = 10,  ///< the ranks of a group made different calls (call agreement)
  kResourceExhausted = 11,  ///< the operating system refused a thread (or another resource)
  kNumeric = 12,      ///< a computed value is not finite where it must be (a training loss, a norm)
  kInterrupted = 13,  ///< the caller asked the call to stop (CpOptions::stop_requested)
};

/// Short stable name of a code, e.g. "invalid_argument".
const char* error_code_name(ErrorCode code) noexcept;

/// The exception thrown by every public cpattn function. what() is one line, starting with the
/// message given at the throw site (no file/line noise for users; code() tells the category).
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
/// Concatenates any streamable values into one string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// `text` on one line: newlines, tabs, backslashes and other control bytes escaped (\n, \t, \\,
/// \xNN); other bytes (UTF-8 included) as they are. For messages that carry outside text.
inline std::string one_line(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

/// `text` as an error quotes outside input (a flag's value, an environment variable): in single
/// quotes, one_line, cut after 64 bytes with "...", so that the message stays one line of
/// bounded length.
inline std::string quoted(std::string_view text) {
  constexpr size_t kMaxBytes = 64;
  std::string out(1, '\'');
  out += one_line(text.substr(0, kMaxBytes));
  out += text.size() > kMaxBytes ? "...'" : "'";
  return out;
}
}  // namespace detail

}  // namespace cpattn

/// Always-on contract check: throws cpattn::Error(code, str_cat(msg...)) when cond is false.
#define CPATTN_CHECK(cond, code, ...)                                        \
  do {                                                                       \
    if (!(cond)) [[unlikely]] {                                              \
      throw ::cpattn::Error((code), ::cpattn::detail::str_cat(__VA_ARGS__)); \
    }                                                                        \
  } while (0)

/// Throws kInvalidArgument/kShapeMismatch naming what was expected and what came:
/// "<what>: expected <expected>, got <actual>".
#define CPATTN_CHECK_EQ(actual, expected, code, what)                                              \
  do {                                                                                             \
    const auto& cpattn_a_ = (actual);                                                              \
    const auto& cpattn_e_ = (expected);                                                            \
    if (!(cpattn_a_ == cpattn_e_)) [[unlikely]] {                                                  \
      throw ::cpattn::Error(                                                                       \
          (code), ::cpattn::detail::str_cat(what, ": expected ", cpattn_e_, ", got ", cpattn_a_)); \
    }                                                                                              \
  } while (0)

/// Debug-only check for hot loops (compiled out with NDEBUG).
#ifdef NDEBUG
#define CPATTN_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define CPATTN_DCHECK(cond) \
  CPATTN_CHECK(cond, ::cpattn::ErrorCode::kInternal, "internal check failed: " #cond)
#endif
