// Fuzz target: the reading of what the ranks of a job send each other at start-up
// (train/agreement.h): every rank's encoded settings (settings_disagreement) and start-up errors
// (startup_failure), P = 1..8 blocks of any bytes, as a rank of another program could send.
// Properties: the decoder reads any bytes, and what it reads encodes and decodes back to itself;
// a disagreement is GroupError(kRankDisagreement) naming the settings; a start-up failure
// carries a message; nothing crashes or throws another exception.
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "train/agreement.h"

namespace {

using cpattn::fuzz::require;

bool same(const std::vector<cpattn::train::ConfigField>& a,
          const std::vector<cpattn::train::ConfigField>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].flag != b[i].flag || a[i].value != b[i].value || a[i].note != b[i].note ||
        a[i].absent_value != b[i].absent_value) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cpattn::fuzz::Input in(data, size);
  const auto p = static_cast<size_t>(in.take_in(1, 8));
  std::vector<std::vector<std::byte>> blocks(p);
  for (size_t r = 0; r < p; ++r) {
    const auto n = static_cast<size_t>(in.take_in(0, 512));
    for (size_t i = 0; i < n && in.remaining() > 0; ++i) blocks[r].push_back(in.take<std::byte>());
  }
  for (const auto& block : blocks) {
    const auto fields = cpattn::train::decode_fields(block);
    require(same(cpattn::train::decode_fields(cpattn::train::encode_fields(fields)), fields),
            "decoded fields do not encode back to themselves");
  }
  try {
    if (const auto error = cpattn::train::settings_disagreement(blocks, "fuzz")) {
      require(error->code() == cpattn::ErrorCode::kRankDisagreement,
              "a settings disagreement that is not kRankDisagreement");
      require(std::string(error->what())
                  .starts_with("fuzz: the ranks were started with different settings: "),
              "a settings disagreement without its head");
    }
    if (const auto error = cpattn::train::startup_failure(blocks)) {
      const std::string what = error->what();
      require(what.starts_with("every rank: ") || what.starts_with("rank "),
              "a start-up failure that names no rank");
    }
  } catch (const std::exception& e) {
    require(false, e.what());
  }
  return 0;
}
