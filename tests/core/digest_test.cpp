// Digest: deterministic, sensitive to every byte, length and order, and stride-independent for
// views; digest_hex formatting.
#include "cpattn/digest.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cpattn/tensor.h"

namespace cpattn {
namespace {

uint64_t of(const std::string& s) { return Digest().string(s).finish(); }

TEST(Digest, DeterministicAndPinned) {
  EXPECT_EQ(of("cpattn"), of("cpattn"));
  // Pinned: a change of the hash function changes every recorded fingerprint and checkpoint
  // checksum, so it must be deliberate.
  EXPECT_EQ(digest_hex(Digest().finish()), "2da2dd3069824bfa");
  EXPECT_EQ(digest_hex(of("cpattn")), "666f70cd0c04760c");
}

TEST(Digest, EveryByteLengthAndOrderMatters) {
  // All sizes around the 32-byte lane block and the 8-byte word, every single-bit flip.
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 64u, 97u}) {
    std::vector<std::byte> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>(i * 37 + 11);
    const uint64_t base = Digest().bytes(data).finish();
    std::set<uint64_t> seen = {base};
    for (size_t i = 0; i < n; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        data[i] ^= static_cast<std::byte>(1 << bit);
        EXPECT_TRUE(seen.insert(Digest().bytes(data).finish()).second)
            << n << " " << i << " " << bit;
        data[i] ^= static_cast<std::byte>(1 << bit);
      }
    }
    // A trailing zero byte changes the length, hence the digest.
    std::vector<std::byte> longer = data;
    longer.push_back(std::byte{0});
    EXPECT_NE(Digest().bytes(longer).finish(), base) << n;
  }
  EXPECT_NE(Digest().string("ab").string("c").finish(), Digest().string("a").string("bc").finish());
  EXPECT_NE(Digest().value(1).value(2).finish(), Digest().value(2).value(1).finish());
}

TEST(Digest, ViewsDigestAlikeWhateverTheirStrides) {
  const std::array<int64_t, 4> shape = {2, 5, 3, 7};
  Tensor bshd(storage_shape(shape, MemoryLayout::kBSHD));
  for (int64_t i = 0; i < bshd.numel(); ++i) bshd.data()[i] = static_cast<float>(i) * 0.5f;
  const uint64_t want = Digest().view(bshd.view()).finish();
  for (MemoryLayout layout : {MemoryLayout::kBHSD, MemoryLayout::kSBHD}) {
    const Tensor other = dense_copy(bshd.view(), layout);
    EXPECT_EQ(Digest().view(other.view(layout)).finish(), want) << memory_layout_name(layout);
  }
  // Same values under another shape digest differently (the shape is part of the digest).
  ConstView reshaped = bshd.view();
  reshaped.shape = {2, 5, 7, 3};
  reshaped.stride = dense_strides(reshaped.shape, MemoryLayout::kBSHD);
  EXPECT_NE(Digest().view(reshaped).finish(), want);
  bshd.data()[17] += 1.0f;
  EXPECT_NE(Digest().view(bshd.view()).finish(), want);
}

TEST(DigestHex, SixteenLowerCaseDigits) {
  EXPECT_EQ(digest_hex(0), "0000000000000000");
  EXPECT_EQ(digest_hex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(digest_hex(~0ull), "ffffffffffffffff");
}

}  // namespace
}  // namespace cpattn
