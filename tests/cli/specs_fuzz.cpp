// Fuzz target: the parsers of the CLI's spec flags: `--docs` (cli/docs_spec.h), `--strategy`
// (parse_strategy), `--layout` (parse_layout) and `--dtype` (parse_dtype). Input: one byte that
// picks the parser, for --docs 8 bytes of the sequence length, then the flag's text.
// Properties: bad text is refused with Error(kInvalidArgument) and a one-line message; what is
// accepted reads back from its name (strategy, layout, dtype), and --docs lengths are in
// [1, 2^40], at most kMaxDocs + 1 of them, and "mean:N" covers exactly S tokens.
#include <numeric>
#include <string>

#include "cli/docs_spec.h"
#include "cpattn/dtype.h"
#include "cpattn/layout.h"
#include "cpattn/strategy.h"
#include "fuzz/fuzz_support.h"

namespace {

using cpattn::fuzz::require;

void docs(cpattn::fuzz::Input& in) {
  const int64_t S = in.take_in(-4, int64_t{1} << 42);
  const std::span<const std::byte> rest = in.rest();
  const std::string text(reinterpret_cast<const char*>(rest.data()), rest.size());
  const std::vector<int64_t> lengths = cpattn::cli::parse_docs(text, S);
  require(lengths.size() <= static_cast<size_t>(cpattn::cli::kMaxDocs) + 1, "too many documents");
  for (const int64_t l : lengths) {
    require(l >= 1 && l <= (int64_t{1} << 40), "a length out of range");
  }
  if (text.rfind("mean:", 0) == 0) {
    require(std::accumulate(lengths.begin(), lengths.end(), int64_t{0}) == S,
            "mean:N does not cover the sequence");
  } else {
    require(text.empty() == lengths.empty(), "a list gave no documents, or no list gave some");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cpattn::fuzz::Input in(data, size);
  const auto which = in.take<uint8_t>() % 4;
  cpattn::fuzz::expect_clean_refusal(
      [&] {
        if (which == 0) return docs(in);
        const std::span<const std::byte> rest = in.rest();
        const std::string text(reinterpret_cast<const char*>(rest.data()), rest.size());
        if (which == 1) {
          const cpattn::Strategy s = cpattn::parse_strategy(text);
          const cpattn::Strategy again = cpattn::parse_strategy(cpattn::strategy_name(s));
          require(again.kind == s.kind && again.ulysses_size == s.ulysses_size &&
                      again.ring_size == s.ring_size,
                  "a strategy does not read back from its name");
        } else if (which == 2) {
          const cpattn::Layout l = cpattn::parse_layout(text);
          require(cpattn::parse_layout(cpattn::layout_name(l)) == l,
                  "a layout does not read back from its name");
        } else {
          const cpattn::DType d = cpattn::parse_dtype(text.c_str());
          require(cpattn::parse_dtype(cpattn::dtype_name(d)) == d,
                  "a dtype does not read back from its name");
        }
      },
      {cpattn::ErrorCode::kInvalidArgument});
  return 0;
}
