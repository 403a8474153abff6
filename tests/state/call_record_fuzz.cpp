// Fuzz target: the reading of the call records every rank receives in the call agreement
// (call_disagreement, state/call_agreement.h): P = 2..9 records of any bytes, as peers of
// another build, a corrupted transport or a bug could send them.
// Properties: for records that are not all equal the error is Error(kRankDisagreement) starting
// "call agreement failed (call N, <op>): "; nothing crashes, reads past a text field's end or
// trips a sanitizer (enum values out of range, texts without their NUL).
#include <cstring>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "state/call_agreement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cpattn::detail::CallRecord;
  cpattn::fuzz::Input in(data, size);
  const auto p = static_cast<size_t>(in.take_in(2, 9));
  std::vector<CallRecord> all(p);
  // Rank 0's record from the input; each other rank's is rank 0's with the input's next bytes
  // laid over it at an offset of the input's choice, so most records differ in a few fields.
  for (size_t r = 0; r < p; ++r) {
    if (r > 0) all[r] = all[0];
    const auto at = static_cast<size_t>(in.take_in(0, sizeof(CallRecord) - 1));
    const auto n = static_cast<size_t>(in.take_in(0, sizeof(CallRecord) - at));
    auto* bytes = reinterpret_cast<std::byte*>(&all[r]);
    for (size_t i = 0; i < n; ++i) bytes[at + i] = in.take<std::byte>();
  }
  bool equal = true;
  for (size_t r = 1; r < p; ++r)
    equal = equal && std::memcmp(&all[r], &all[0], sizeof(CallRecord)) == 0;
  if (equal) return 0;
  const cpattn::Error e = cpattn::detail::call_disagreement(all);
  cpattn::fuzz::require(e.code() == cpattn::ErrorCode::kRankDisagreement,
                        "a disagreement that is not kRankDisagreement");
  cpattn::fuzz::require(std::string_view(e.what()).starts_with("call agreement failed (call "),
                        "a disagreement message without its head");
  return 0;
}
