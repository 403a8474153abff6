// Tensor storage and view helpers.
#include "cpattn/tensor.h"

#include <cstring>
#include <new>

#include "cpattn/error.h"

namespace cpattn {

const char* memory_layout_name(MemoryLayout layout) noexcept {
  switch (layout) {
    case MemoryLayout::kBSHD:
      return "BSHD";
    case MemoryLayout::kBHSD:
      return "BHSD";
    case MemoryLayout::kSBHD:
      return "SBHD";
  }
  return "?";
}

std::array<int64_t, 4> dense_strides(const std::array<int64_t, 4>& shape, MemoryLayout layout) {
  const int64_t b = shape[0], s = shape[1], h = shape[2], d = shape[3];
  switch (layout) {
    case MemoryLayout::kBSHD:
      return {s * h * d, h * d, d, 1};
    case MemoryLayout::kBHSD:
      return {h * s * d, d, s * d, 1};
    case MemoryLayout::kSBHD:
      return {h * d, b * h * d, d, 1};
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown MemoryLayout");
}

Tensor::Tensor(std::vector<int64_t> shape, MemoryCounter* counter) : shape_(std::move(shape)) {
  numel_ = 1;
  for (int64_t d : shape_) {
    CPATTN_CHECK(d >= 0, ErrorCode::kInvalidArgument, "Tensor dimensions must be >= 0, got ",
                 shape_string());
    numel_ *= d;
  }
  const int64_t bytes = numel_ * static_cast<int64_t>(sizeof(float));
  // An empty tensor is not charged anywhere, so it never touches (or pins) a counter.
  if (bytes == 0) {
    counter = nullptr;
  } else if (counter == nullptr) {
    counter = &process_memory();
  }
  // 64-byte alignment: whole cache lines and aligned AVX loads for the first row.
  auto* p = static_cast<float*>(
      ::operator new[](static_cast<size_t>(bytes > 0 ? bytes : 1), std::align_val_t{64}));
  if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  storage_ = std::unique_ptr<float[], Release>(p, Release{counter, bytes});
  if (counter != nullptr) counter->add_bytes(bytes);
}

void Tensor::Release::operator()(float* p) const noexcept {
  if (p == nullptr) return;
  ::operator delete[](p, std::align_val_t{64});
  if (counter != nullptr) counter->add_bytes(-bytes);
}

namespace {
std::array<int64_t, 4> logical_shape(const std::vector<int64_t>& s, MemoryLayout layout) {
  CPATTN_CHECK(s.size() == 4, ErrorCode::kShapeMismatch,
               "Tensor::view needs a rank-4 tensor, got rank ", s.size());
  switch (layout) {
    case MemoryLayout::kBSHD:
      return {s[0], s[1], s[2], s[3]};
    case MemoryLayout::kBHSD:
      return {s[0], s[2], s[1], s[3]};
    case MemoryLayout::kSBHD:
      return {s[1], s[0], s[2], s[3]};
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown MemoryLayout");
}
}  // namespace

View Tensor::view(MemoryLayout layout) {
  const auto shape = logical_shape(shape_, layout);
  return {data(), shape, dense_strides(shape, layout)};
}

ConstView Tensor::view(MemoryLayout layout) const {
  const auto shape = logical_shape(shape_, layout);
  return {data(), shape, dense_strides(shape, layout)};
}

Tensor Tensor::clone() const {
  Tensor t(shape_, storage_.get_deleter().counter);
  if (numel_ > 0) std::memcpy(t.data(), data(), static_cast<size_t>(numel_) * sizeof(float));
  return t;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  return s + "]";
}

}  // namespace cpattn
