// Tensor and StridedView: zero-filled counted storage, layouts and their strides, the view checks
// and copies, and bad shapes.
#include "cpattn/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "cpattn/error.h"
#include "cpattn/memory.h"
#include "support/errors.h"

namespace cpattn {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

TEST(Tensor, ZeroFilledAlignedAndCounted) {
  const auto counter = MemoryCounter::create();
  {
    const Tensor t({2, 3, 5, 7}, counter.get());
    EXPECT_EQ(t.numel(), 210);
    EXPECT_EQ(t.shape_string(), "[2, 3, 5, 7]");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
    for (float x : t.span()) ASSERT_EQ(x, 0.0f);
    EXPECT_EQ(counter->stats().live_bytes, 210 * 4);
    const Tensor c = t.clone();  // a clone is charged to the same counter
    EXPECT_EQ(counter->stats().live_bytes, 2 * 210 * 4);
  }
  EXPECT_EQ(counter->stats().live_bytes, 0);
  EXPECT_EQ(counter->stats().peak_bytes, 2 * 210 * 4);
}

TEST(Tensor, UninitializedHasTheShapeDtypeAlignmentAndCharge) {
  const auto counter = MemoryCounter::create();
  {
    Tensor t = Tensor::uninitialized({3, 1, 5, 2}, DType::kBF16, counter.get());
    EXPECT_EQ(t.numel(), 30);
    EXPECT_EQ(t.dtype(), DType::kBF16);
    EXPECT_EQ(t.bytes().size(), 60u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
    EXPECT_EQ(counter->stats().live_bytes, 60);
    Tensor f = Tensor::uninitialized({4}, DType::kF32, counter.get());
    f.span()[3] = 1.5f;  // writable; a clone copies what was written
    EXPECT_EQ(f.clone().span()[3], 1.5f);
    EXPECT_EQ(counter->stats().peak_bytes, 60 + 16 + 16);
  }
  EXPECT_EQ(counter->stats().live_bytes, 0);
  EXPECT_THAT(error_of([] {
                (void)Tensor::uninitialized({2, -1});
              }).what(),
              HasSubstr("must be >= 0"));
  EXPECT_EQ(Tensor::uninitialized({0, 3}, DType::kF32, counter.get()).numel(), 0);
  EXPECT_EQ(counter->stats().live_bytes, 0);
}

TEST(Tensor, EmptyTensorsAreNotCharged) {
  const auto counter = MemoryCounter::create();
  const Tensor empty({4, 0, 3}, counter.get());
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(counter->stats().peak_bytes, 0);
  EXPECT_EQ(counter.use_count(), 1) << "an empty tensor must not pin its counter";
}

TEST(Tensor, MovesTransferOwnershipAndCharge) {
  const auto counter = MemoryCounter::create();
  Tensor a({8}, counter.get());
  a.data()[3] = 2.5f;
  Tensor b = std::move(a);
  EXPECT_EQ(b.data()[3], 2.5f);
  EXPECT_EQ(counter->stats().live_bytes, 32);
  b = Tensor({2}, counter.get());  // the old buffer is released
  EXPECT_EQ(counter->stats().live_bytes, 8);
}

TEST(Tensor, OutlivesTheOwnerOfItsCounter) {
  Tensor kept;
  std::weak_ptr<MemoryCounter> watch;
  {
    const auto counter = MemoryCounter::create(&process_memory());
    watch = counter;
    kept = Tensor({16}, counter.get());
  }
  ASSERT_FALSE(watch.expired()) << "the tensor keeps its counter alive";
  EXPECT_EQ(watch.lock()->stats().live_bytes, 64);
  kept = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(Tensor, RejectsNegativeDimensions) {
  const Error e = error_of([] { Tensor({2, -1}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("[2, -1]"));
}

TEST(Tensor, ViewsOfEachLayoutAddressTheSameElements) {
  const std::array<int64_t, 4> shape = {2, 3, 4, 5};  // [B, S, H, D]
  for (MemoryLayout layout : {MemoryLayout::kBSHD, MemoryLayout::kBHSD, MemoryLayout::kSBHD}) {
    Tensor t(storage_shape(shape, layout));
    const View v = t.view(layout);
    EXPECT_EQ(v.shape, shape) << memory_layout_name(layout);
    EXPECT_EQ(v.stride, dense_strides(shape, layout));
    // Every element has its own address and the dense order is the storage order.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < 3; ++s)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t d = 0; d < 5; ++d)
            v(b, s, h, d) = static_cast<float>(((b * 3 + s) * 4 + h) * 5 + d);
    const Tensor bshd = dense_copy(v);
    for (int64_t i = 0; i < bshd.numel(); ++i) ASSERT_EQ(bshd.data()[i], static_cast<float>(i));
    const Tensor back = dense_copy(bshd.view(), layout);
    EXPECT_EQ(back.shape(), t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(back.data()[i], t.data()[i]);
  }
  EXPECT_EQ(storage_shape(shape, MemoryLayout::kBHSD), (std::vector<int64_t>{2, 4, 3, 5}));
  EXPECT_EQ(storage_shape(shape, MemoryLayout::kSBHD), (std::vector<int64_t>{3, 2, 4, 5}));
  EXPECT_THROW(Tensor({2, 3}).view(), Error);
}

TEST(StridedView, ChecksNameTheOperand) {
  const Tensor t({1, 2, 3, 4});
  ConstView v = t.view();
  check_view(v, "q", "[B, S, H, D]", {1, 2, 3, 4});
  Error e = error_of([&] { check_view(v, "q", "[B, S, H, D]", {1, 2, 3, 5}); });
  EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
  EXPECT_STREQ(e.what(), "q must have shape [B, S, H, D] = [1, 2, 3, 5], got [1, 2, 3, 4]");
  ConstView negative = v;
  negative.stride[2] = -4;
  e = error_of([&] { check_readable(negative, "k"); });
  EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
  EXPECT_THAT(e.what(), HasSubstr("k strides must be >= 0"));
  ConstView null = v;
  null.data = nullptr;
  e = error_of([&] { check_readable(null, "v"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  null.shape[0] = 0;  // no elements: no data needed
  check_readable(null, "v");
  // Views whose offsets would wrap around (a count or a last offset beyond int64) are refused
  // before anything reads them; the largest view that fits is accepted.
  ConstView huge = v;
  huge.shape = {int64_t{1} << 40, 8, 4, int64_t{1} << 40};
  e = error_of([&] { check_readable(huge, "q"); });
  EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
  EXPECT_THAT(e.what(), HasSubstr("its extent overflows a 64-bit byte offset"));
  ConstView wrapping = v;  // 3 rows 2^62 floats apart: the last one 2^64.6 bytes in
  wrapping.stride[1] = int64_t{1} << 62;
  wrapping.shape[1] = 3;
  EXPECT_THROW(check_readable(wrapping, "q"), Error);
  wrapping.shape[1] = 2;  // 2^62 floats = 2^64 bytes: still wraps
  EXPECT_THROW(check_readable(wrapping, "q"), Error);
  wrapping.stride[1] = int64_t{1} << 59;  // 2^61 bytes: fits (never read here)
  check_readable(wrapping, "q");
  huge.shape = {0, int64_t{1} << 40, int64_t{1} << 40, 8};  // empty, whatever the rest
  check_readable(huge, "q");
}

TEST(StridedView, CopyViewBetweenStridesAndShapeMismatch) {
  Tensor a({1, 3, 2, 4});
  for (int64_t i = 0; i < a.numel(); ++i) a.data()[i] = static_cast<float>(i);
  Tensor b(storage_shape({1, 3, 2, 4}, MemoryLayout::kBHSD));
  copy_view(a.view(), b.view(MemoryLayout::kBHSD));
  EXPECT_EQ(b.view(MemoryLayout::kBHSD)(0, 2, 1, 3), a.view()(0, 2, 1, 3));
  // A view with a non-unit innermost stride (every other element) takes the element loop.
  Tensor wide({1, 3, 2, 8});
  View every_other = wide.view();
  every_other.shape[3] = 4;
  every_other.stride[3] = 2;
  copy_view(a.view(), every_other);
  EXPECT_EQ(wide.view()(0, 1, 1, 6), a.view()(0, 1, 1, 3));
  const Error e = error_of([&] { copy_view(a.view(), Tensor({1, 3, 2, 5}).view()); });
  EXPECT_EQ(e.code(), ErrorCode::kShapeMismatch);
}

TEST(ShapeString, FormatsAnyRank) {
  EXPECT_EQ(shape_string(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(shape_string(std::vector<int64_t>{7}), "[7]");
  EXPECT_EQ(shape_string(std::array<int64_t, 4>{2, 1024, 8, 64}), "[2, 1024, 8, 64]");
}

}  // namespace
}  // namespace cpattn
