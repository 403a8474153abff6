// The --docs spec of `cpattn plan`: the packed documents' lengths of the planned sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cpattn::cli {

/// The most documents --docs mean:N lists (2^24): they are listed one by one.
inline constexpr int64_t kMaxDocs = int64_t{1} << 24;

/// The document lengths of `text`: "" none (one document); "300,5,700,19" those lengths, each a
/// whole decimal number in [1, 2^40]; "mean:N" (N >= 2) documents of lengths cycling around N
/// (N/2 .. 3N/2) until S >= 0 tokens are covered, the last one cut (at most kMaxDocs of them).
/// Throws Error(kInvalidArgument) naming the accepted forms for anything else. The lengths are not
/// checked against S here (the planner checks that they sum to S).
std::vector<int64_t> parse_docs(const std::string& text, int64_t S);

}  // namespace cpattn::cli
