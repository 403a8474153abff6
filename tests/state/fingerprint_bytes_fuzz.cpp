// Fuzz target: fingerprint_from_bytes (cpattn/fingerprint.h), which reads bytes a framework kept
// in a tensor and handed back: any bytes, of any length.
// Properties: bytes of another length, an enum value that is none of its enumerators or a bool
// byte other than 0 and 1 are refused with Error(kInvalidArgument) and a one-line message;
// anything accepted is a fingerprint whose byte form is exactly the input.
#include <cstring>
#include <span>

#include "cpattn/fingerprint.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  cpattn::fuzz::expect_clean_refusal(
      [&] {
        const auto again = cpattn::fingerprint_bytes(cpattn::fingerprint_from_bytes(bytes));
        cpattn::fuzz::require(size == again.size() && std::memcmp(again.data(), data, size) == 0,
                              "an accepted fingerprint whose byte form is not the input");
      },
      {cpattn::ErrorCode::kInvalidArgument});
  return 0;
}
