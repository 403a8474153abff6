// Fuzz target: the parser of `cpattn verify --slices` (cli/slices_spec.h), and the library's one
// validation of what it accepts (resolve_params: reversed ranges, overlapping slices). Input: the
// flag's text (a SPEC or a file's contents).
// Properties: bad text is refused with Error(kInvalidArgument) and a one-line message; what is
// accepted is 1 to kMaxSlices slices with positions >= 0 whose canonical text (format_slices)
// reads back to the same slices; resolve_params refuses a bad list only with kInvalidArgument.
#include <string>
#include <vector>

#include "cli/slices_spec.h"
#include "cpattn/params.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cpattn::fuzz::Input in(data, size);
  const std::span<const std::byte> rest = in.rest();
  const std::string text(reinterpret_cast<const char*>(rest.data()), rest.size());
  cpattn::fuzz::expect_clean_refusal(
      [&] {
        using cpattn::fuzz::require;
        const std::vector<cpattn::MaskSlice> slices = cpattn::cli::parse_slices(text);
        require(!slices.empty() && slices.size() <= cpattn::cli::kMaxSlices,
                "accepted no slices or too many");
        for (const cpattn::MaskSlice& s : slices) {
          require(s.q_begin >= 0 && s.q_end >= 0 && s.k_begin >= 0 && s.k_end >= 0,
                  "a negative position");
        }
        require(cpattn::cli::parse_slices(cpattn::cli::format_slices(slices)) == slices,
                "slices do not read back from their canonical text");
        cpattn::AttentionParams params;
        params.slices = slices;
        cpattn::resolve_params(params, 1, 1);
      },
      {cpattn::ErrorCode::kInvalidArgument});
  return 0;
}
