// The document-lengths spec of `cpattn plan --docs` and `cpattn verify --varlen` (docs_spec.h).
#include "cli/docs_spec.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "cpattn/error.h"

namespace cpattn::cli {

namespace {

// One document length of `flag`: a whole decimal number in [min_length, 2^40], else
// Error(kInvalidArgument) naming the accepted forms.
int64_t parse_doc_length(std::string_view item, int64_t min_length, const char* flag) {
  constexpr int64_t kMaxLength = int64_t{1} << 40;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
  CPATTN_CHECK(ec == std::errc() && end == item.data() + item.size() && value >= min_length &&
                   value <= kMaxLength,
               ErrorCode::kInvalidArgument, flag, ": ", detail::quoted(item),
               " is not a document length in [", min_length,
               ", 2^40]; expected L1,L2,... or mean:N");
  return value;
}

}  // namespace

std::vector<int64_t> parse_docs(const std::string& text, int64_t S, int64_t min_length,
                                const char* flag) {
  std::vector<int64_t> lengths;
  if (text.empty()) return lengths;
  if (text.rfind("mean:", 0) == 0) {
    const int64_t mean = parse_doc_length(std::string_view(text).substr(5), 1, flag);
    CPATTN_CHECK(mean >= 2, ErrorCode::kInvalidArgument, flag, " mean:N needs N >= 2");
    CPATTN_CHECK(S >= 0 && S / (mean / 2) <= kMaxDocs, ErrorCode::kInvalidArgument, flag,
                 " mean:", mean, " on ", S, " tokens would list more than 2^24 documents",
                 S < 0 ? " (a negative length)" : "; pass a larger N or the lengths");
    for (int64_t at = 0, i = 0; at < S; ++i) {
      const int64_t l = std::min(S - at, mean / 2 + (i * 37) % (mean + 1));
      lengths.push_back(std::max<int64_t>(l, 1));
      at += lengths.back();
    }
    return lengths;
  }
  std::string_view rest(text);
  while (true) {
    const size_t comma = rest.find(',');
    lengths.push_back(parse_doc_length(rest.substr(0, comma), min_length, flag));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return lengths;
}

}  // namespace cpattn::cli
