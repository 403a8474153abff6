// The document-lengths spec of `cpattn plan --docs` (the packed documents of the planned
// sequence) and `cpattn verify --varlen` (the documents of a varlen call).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cpattn::cli {

/// The most documents --docs mean:N lists (2^24): they are listed one by one.
inline constexpr int64_t kMaxDocs = int64_t{1} << 24;

/// The document lengths of `text`: "" none (one document); "300,5,700,19" those lengths, each a
/// whole decimal number in [min_length, 2^40] (min_length 1 for --docs; 0 for --varlen, whose
/// empty documents are valid); "mean:N" (N >= 2) documents of lengths cycling around N
/// (N/2 .. 3N/2) until S >= 0 tokens are covered, the last one cut (at most kMaxDocs of them).
/// Throws Error(kInvalidArgument) naming `flag` and the accepted forms for anything else. The
/// lengths are not checked against S here (the planner checks that they sum to S).
std::vector<int64_t> parse_docs(const std::string& text, int64_t S, int64_t min_length = 1,
                                const char* flag = "--docs");

}  // namespace cpattn::cli
