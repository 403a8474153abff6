// The --slices spec of `cpattn verify`: a mask given as MagiAttention-style slices (MaskSlice,
// cpattn/params.h), as text on the command line or as the lines of a file.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cpattn/params.h"

namespace cpattn::cli {

/// The most slices one --slices text may list (2^20).
inline constexpr size_t kMaxSlices = size_t{1} << 20;

/// The accepted form, for help texts and error messages.
inline constexpr const char* kSlicesGrammar =
    "q_begin:q_end,k_begin:k_end,type with type full, causal, inv_causal or bi_causal, slices "
    "separated by ';' or new lines";

/// The mask slices `text` lists, in order. Grammar (spaces, tabs and '\r' are allowed around
/// every token; a '#' starts a comment that runs to the end of its line):
///   text  := item { (';' | '\n') item }     items that are blank (or only a comment) are skipped
///   slice := range ',' range ',' type       the q positions, then the k positions
///   range := begin ':' end                  positions [begin, end), whole decimal numbers
///                                           0 .. 2^63 - 1 (digits only, no sign)
///   type  := full | causal | inv_causal | bi_causal   (parse_slice_type, params.h)
/// e.g. "0:4096,0:1365,full; 1365:4096,1365:4096,causal" (prefix-LM: a bidirectional prefix of
/// 1365 positions, causal after it). `what` names the text in messages ("--slices" or the file).
/// Throws Error(kInvalidArgument), one line: "<what>: slice N[ (line L)] '<item>': <what is
/// wrong>; expected <kSlicesGrammar>" (N counts slices from 0 as resolve_params does, the line
/// is given when the text has several; an unknown type names the four instead), no slice at
/// all, or more than kMaxSlices. The ranges are
/// not checked against each other here (reversed or overlapping slices): resolve_params
/// (params.h) is the one rule for those.
std::vector<MaskSlice> parse_slices(std::string_view text, std::string_view what = "--slices");

/// The canonical text of `slices`: "q_begin:q_end,k_begin:k_end,type" joined by ';', which
/// parse_slices reads back to the same slices ("" for none).
std::string format_slices(std::span<const MaskSlice> slices);

}  // namespace cpattn::cli
