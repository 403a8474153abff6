// The --slices spec of `cpattn verify` (slices_spec.h).
#include "cli/slices_spec.h"

#include <charconv>
#include <cstdint>
#include <tuple>
#include <utility>

#include "cpattn/error.h"

namespace cpattn::cli {

namespace {

std::string_view trim(std::string_view s) {
  constexpr std::string_view kBlank = " \t\r";
  const size_t first = s.find_first_not_of(kBlank);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kBlank) - first + 1);
}

// `text` cut at every `sep`, each part trimmed.
std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = text.find(sep);
    parts.push_back(trim(text.substr(0, at)));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

// Where a slice came from, for messages: "--slices: slice 2 (line 5) '0:4,x'".
struct ItemPlace {
  std::string_view what;
  size_t index;
  size_t line;  // 0: the text has one line
  std::string_view item;
};

// Throws "<what>: slice N[ (line L)] '<item>': <problem>[; expected <kSlicesGrammar>]".
[[noreturn]] void refuse(const ItemPlace& at, const std::string& problem, bool grammar = true) {
  const std::string line = at.line > 0 ? detail::str_cat(" (line ", at.line, ")") : "";
  throw Error(
      ErrorCode::kInvalidArgument,
      detail::str_cat(at.what, ": slice ", at.index, line, " ", detail::quoted(at.item), ": ",
                      problem, grammar ? "; expected " : "", grammar ? kSlicesGrammar : ""));
}

// One position of a range: digits only, a value in [0, 2^63).
int64_t parse_position(const ItemPlace& at, std::string_view text, const char* name) {
  int64_t value = -1;
  bool digits = !text.empty();
  for (const char c : text) digits = digits && c >= '0' && c <= '9';
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (!digits || ec != std::errc() || end != text.data() + text.size()) {
    refuse(at, detail::str_cat(name, " ", detail::quoted(text),
                               " is not a position (a whole decimal number in [0, 2^63))"));
  }
  return value;
}

// "begin:end" -> {begin, end}; `side` is "q" or "k".
std::pair<int64_t, int64_t> parse_range(const ItemPlace& at, std::string_view text,
                                        const char* side) {
  const std::vector<std::string_view> ends = split(text, ':');
  if (ends.size() != 2) {
    refuse(at, detail::str_cat(side, " range ", detail::quoted(text), " is not begin:end"));
  }
  const std::string begin = std::string(side) + "_begin", end = std::string(side) + "_end";
  return {parse_position(at, ends[0], begin.c_str()), parse_position(at, ends[1], end.c_str())};
}

MaskSlice parse_slice(const ItemPlace& at) {
  const std::vector<std::string_view> fields = split(at.item, ',');
  if (fields.size() != 3) {
    refuse(at, detail::str_cat("has ", fields.size(),
                               " fields separated by ','; a slice has 3 (q range, k range, type)"));
  }
  MaskSlice slice;
  std::tie(slice.q_begin, slice.q_end) = parse_range(at, fields[0], "q");
  std::tie(slice.k_begin, slice.k_end) = parse_range(at, fields[1], "k");
  try {
    slice.type = parse_slice_type(fields[2]);
  } catch (const Error& e) {
    refuse(at, e.what(), false);  // names the accepted types
  }
  return slice;
}

}  // namespace

std::vector<MaskSlice> parse_slices(std::string_view text, std::string_view what) {
  const bool several_lines = text.find('\n') != std::string_view::npos;
  std::vector<MaskSlice> slices;
  size_t line_number = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    for (const std::string_view item : split(line, ';')) {
      if (item.empty()) continue;
      CPATTN_CHECK(slices.size() < kMaxSlices, ErrorCode::kInvalidArgument, what,
                   ": more than 2^20 slices");
      slices.push_back(parse_slice({what, slices.size(), several_lines ? line_number : 0, item}));
    }
  }
  CPATTN_CHECK(!slices.empty(), ErrorCode::kInvalidArgument, what,
               ": no slice given (only blanks or comments); expected ", kSlicesGrammar);
  return slices;
}

std::string format_slices(std::span<const MaskSlice> slices) {
  std::string text;
  for (const MaskSlice& s : slices) {
    if (!text.empty()) text += ';';
    text += detail::str_cat(s.q_begin, ":", s.q_end, ",", s.k_begin, ":", s.k_end, ",",
                            slice_type_name(s.type));
  }
  return text;
}

}  // namespace cpattn::cli
