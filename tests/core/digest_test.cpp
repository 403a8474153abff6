// Digest: deterministic, sensitive to every byte, length and order, and stride-independent for
// views; digest_hex formatting.
#include "cpattn/digest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cpattn/dtype.h"
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

// A view whose elements are not adjacent (a transposed [.., D] axis) digests as its dense copy,
// for fp32 and 16-bit elements and rows longer than the digest's 1 KiB chunks.
TEST(Digest, ARowOfStridedElementsDigestsAsItsDenseCopy) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int64_t d : {1, 7, 300, 700}) {
      const std::array<int64_t, 4> shape = {1, 3, 2, d};
      // Storage [B, S, D, H]: the view's d stride is H.
      Tensor storage({1, 3, d, 2}, dtype);
      ConstView strided = std::as_const(storage).view();
      strided.shape = shape;
      strided.stride = {3 * d * 2, d * 2, 1, 2};
      for (int64_t i = 0; i < storage.numel(); ++i) {
        store_from_float(dtype, storage.bytes().data() + i * dtype_size(dtype),
                         static_cast<float>(i % 251) - 100.0f);
      }
      const Tensor dense = dense_copy(strided, dtype, MemoryLayout::kBSHD);
      EXPECT_EQ(Digest().view(strided).finish(), Digest().view(dense.view()).finish())
          << dtype_name(dtype) << " D " << d;
    }
  }
}

// The rows' digests are summed, so any split over threads gives the same digest; the sum still
// keys each row by its index, so two rows swapped change it.
TEST(Digest, ViewsDigestTheSameOnAnyNumberOfThreads) {
  Tensor t({2, 700, 3, 128});  // 2.1 MiB: up to 2 workers
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(i % 1013) * 0.25f;
  const uint64_t one = Digest().view(t.view()).finish();
  for (const int threads : {2, 3, 7, 64, 1000}) {
    EXPECT_EQ(Digest().view(t.view(), threads).finish(), one) << threads;
  }
  Tensor big({1, 4096, 8, 128});  // 16 MiB: 7 threads run
  for (int64_t i = 0; i < big.numel(); ++i) big.data()[i] = static_cast<float>(i % 977);
  const uint64_t big_one = Digest().view(big.view()).finish();
  EXPECT_EQ(Digest().view(big.view(), 7).finish(), big_one);
  std::swap_ranges(big.data(), big.data() + 128, big.data() + 128 * 4000);  // rows 0 and 4000
  EXPECT_NE(Digest().view(big.view(), 7).finish(), big_one);
}

// Views without rows (a rank with no tokens: S = 0; no heads) digest their shape.
TEST(Digest, ViewsWithoutRowsDigestTheirShape) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1, 0, 2, 4}, {1, 3, 0, 4}, {0, 3, 2, 4}, {1, 3, 2, 0}}) {
    const Tensor t(shape);
    const uint64_t one = Digest().view(t.view(), 1).finish();
    EXPECT_EQ(Digest().view(t.view(), 8).finish(), one);
    ConstView other = t.view();
    other.shape[3] += 1;
    if (other.shape[0] * other.shape[1] * other.shape[2] == 0) {
      EXPECT_NE(Digest().view(other).finish(), one);
    }
  }
}

TEST(DigestHex, SixteenLowerCaseDigits) {
  EXPECT_EQ(digest_hex(0), "0000000000000000");
  EXPECT_EQ(digest_hex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(digest_hex(~0ull), "ffffffffffffffff");
}

}  // namespace
}  // namespace cpattn
