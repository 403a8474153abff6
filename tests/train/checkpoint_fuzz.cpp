// Fuzz target: decode_checkpoint (train/checkpoint.h), the reader of `--resume DIR` files.
// Input: one mode byte, then the file's bytes. With an odd mode byte the header's size field and
// the trailing checksum are first rewritten to fit the bytes (the format of docs/reliability.md,
// "Checkpoint format"), so that the fuzzer reaches the checks of the body behind the checksum.
// Properties: every input is a checkpoint or is refused with Error(kIo) and a one-line message;
// an accepted checkpoint encodes back to its own bytes (the format has one encoding).
#include <cstring>
#include <vector>

#include "cpattn/digest.h"
#include "fuzz/fuzz_support.h"
#include "train/checkpoint.h"

namespace {

constexpr size_t kSizeAt = 16;        // magic 8, version 4, reserved 4
constexpr size_t kChecksumBytes = 8;  // the Digest of every byte before it

void repair(std::vector<std::byte>& file) {
  if (file.size() < kSizeAt + 8 + kChecksumBytes) return;
  const uint64_t total = file.size();
  std::memcpy(file.data() + kSizeAt, &total, sizeof total);
  const uint64_t checksum =
      cpattn::Digest()
          .bytes(std::span<const std::byte>(file.data(), file.size() - kChecksumBytes))
          .finish();
  std::memcpy(file.data() + file.size() - kChecksumBytes, &checksum, sizeof checksum);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cpattn::fuzz::Input in(data, size);
  const auto mode = in.take<uint8_t>();
  const std::span<const std::byte> rest = in.rest();
  std::vector<std::byte> file(rest.begin(), rest.end());
  if (mode & 1) repair(file);
  cpattn::fuzz::expect_clean_refusal(
      [&] {
        const cpattn::train::Checkpoint c = cpattn::train::decode_checkpoint(file, "fuzz");
        cpattn::fuzz::require(cpattn::train::encode_checkpoint(c) == file,
                              "the checkpoint does not encode back to its bytes");
      },
      {cpattn::ErrorCode::kIo});
  return 0;
}
