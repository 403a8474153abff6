// Tensor storage and view helpers.
#include "cpattn/tensor.h"

#include <algorithm>
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

std::vector<int64_t> storage_shape(const std::array<int64_t, 4>& s, MemoryLayout layout) {
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

std::string shape_string(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

void check_readable(ConstView view, std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    CPATTN_CHECK(view.shape[i] >= 0, ErrorCode::kShapeMismatch, name,
                 " dimensions must be >= 0, got ", shape_string(view.shape));
    CPATTN_CHECK(view.stride[i] >= 0, ErrorCode::kShapeMismatch, name,
                 " strides must be >= 0, got ", shape_string(view.stride));
  }
  if (std::find(view.shape.begin(), view.shape.end(), 0) != view.shape.end()) return;  // empty
  // Its element count and the byte offset of its last element must fit in int64: offsets that
  // wrap around would read other memory (or fault) instead of failing here.
  int64_t count = 1;
  int64_t last = 0;
  bool overflows = false;
  for (int i = 0; i < 4; ++i) {
    int64_t step = 0;
    overflows |= __builtin_mul_overflow(count, view.shape[i], &count);
    overflows |= __builtin_mul_overflow(view.shape[i] - 1, view.stride[i], &step);
    overflows |= __builtin_add_overflow(last, step, &last);
  }
  overflows |= __builtin_add_overflow(last, 1, &last);  // the elements up to the last one
  overflows |= __builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(view.dtype)), &last);
  CPATTN_CHECK(!overflows, ErrorCode::kShapeMismatch, name, " has shape ", shape_string(view.shape),
               " and strides ", shape_string(view.stride),
               ": its extent overflows a 64-bit byte offset");
  CPATTN_CHECK(view.data != nullptr, ErrorCode::kInvalidArgument, name, " has shape ",
               shape_string(view.shape), " but a null data pointer");
}

void check_view(ConstView view, std::string_view name, std::string_view dims,
                const std::array<int64_t, 4>& expected) {
  CPATTN_CHECK(view.shape == expected, ErrorCode::kShapeMismatch, name, " must have shape ", dims,
               " = ", shape_string(expected), ", got ", shape_string(view.shape));
  check_readable(view, name);
}

namespace {
const std::byte* element_address(ConstView v, int64_t offset) {
  return reinterpret_cast<const std::byte*>(v.data) + offset * dtype_size(v.dtype);
}
}  // namespace

float read_element(ConstView view, int64_t b, int64_t s, int64_t h, int64_t d) {
  return load_as_float(view.dtype, element_address(view, view.offset(b, s, h, d)));
}

void write_element(View view, int64_t b, int64_t s, int64_t h, int64_t d, float x) {
  store_from_float(view.dtype,
                   const_cast<std::byte*>(element_address(view, view.offset(b, s, h, d))), x);
}

void copy_view(ConstView src, View dst) {
  CPATTN_CHECK(src.shape == dst.shape, ErrorCode::kShapeMismatch, "copy_view: shapes ",
               shape_string(src.shape), " and ", shape_string(dst.shape), " differ");
  if (src.dtype != DType::kF32 || dst.dtype != DType::kF32) {
    // Another dtype on either side: element by element through the one conversion (dtype.h).
    const int64_t esize = dtype_size(src.dtype);
    const bool same = src.dtype == dst.dtype;
    const bool rows = same && src.stride[3] == 1 && dst.stride[3] == 1;  // whole-row memcpy
    for (int64_t b = 0; b < src.shape[0]; ++b) {
      for (int64_t s = 0; s < src.shape[1]; ++s) {
        for (int64_t h = 0; h < src.shape[2]; ++h) {
          if (rows && src.shape[3] > 0) {
            std::memcpy(const_cast<std::byte*>(element_address(dst, dst.offset(b, s, h, 0))),
                        element_address(src, src.offset(b, s, h, 0)),
                        static_cast<size_t>(esize * src.shape[3]));
            continue;
          }
          for (int64_t d = 0; d < src.shape[3]; ++d) {
            if (same) {
              std::memcpy(const_cast<std::byte*>(element_address(dst, dst.offset(b, s, h, d))),
                          element_address(src, src.offset(b, s, h, d)), static_cast<size_t>(esize));
            } else {
              write_element(dst, b, s, h, d, read_element(src, b, s, h, d));
            }
          }
        }
      }
    }
    return;
  }
  const int64_t D = src.shape[3], ss = src.stride[3], ds = dst.stride[3];
  for (int64_t b = 0; b < src.shape[0]; ++b) {
    for (int64_t s = 0; s < src.shape[1]; ++s) {
      for (int64_t h = 0; h < src.shape[2]; ++h) {
        if (D == 0) continue;  // no row address is formed (data may be null)
        const float* from = &src(b, s, h, 0);
        float* to = &dst(b, s, h, 0);
        if (ss == 1 && ds == 1) {
          std::memcpy(to, from, static_cast<size_t>(D) * sizeof(float));  // the common case
        } else {
          for (int64_t x = 0; x < D; ++x) to[x * ds] = from[x * ss];
        }
      }
    }
  }
}

Tensor dense_copy(ConstView src, MemoryLayout layout, MemoryCounter* counter) {
  return dense_copy(src, src.dtype, layout, counter);
}

Tensor dense_copy(ConstView src, DType dtype, MemoryLayout layout, MemoryCounter* counter) {
  Tensor t(storage_shape(src.shape, layout), dtype, counter);
  copy_view(src, t.view(layout));
  return t;
}

Tensor::Tensor(std::vector<int64_t> shape, MemoryCounter* counter)
    : Tensor(std::move(shape), DType::kF32, counter) {}

Tensor::Tensor(std::vector<int64_t> shape, DType dtype, MemoryCounter* counter)
    : Tensor(std::move(shape), dtype, counter, Fill::kZeros) {}

Tensor Tensor::uninitialized(std::vector<int64_t> shape, DType dtype, MemoryCounter* counter) {
  return Tensor(std::move(shape), dtype, counter, Fill::kNone);
}

Tensor::Tensor(std::vector<int64_t> shape, DType dtype, MemoryCounter* counter, Fill fill)
    : shape_(std::move(shape)), dtype_(dtype) {
  numel_ = 1;
  for (int64_t d : shape_) {
    CPATTN_CHECK(d >= 0, ErrorCode::kInvalidArgument, "Tensor dimensions must be >= 0, got ",
                 shape_string());
    numel_ *= d;
  }
  const int64_t bytes = numel_ * dtype_size(dtype_);
  // An empty tensor is not charged anywhere, so it never touches (or pins) a counter.
  std::shared_ptr<MemoryCounter> charged;
  if (bytes > 0) charged = (counter ? *counter : process_memory()).shared_from_this();
  // 64-byte alignment: whole cache lines and aligned AVX loads for the first row.
  auto* p = static_cast<float*>(
      ::operator new[](static_cast<size_t>(bytes > 0 ? bytes : 1), std::align_val_t{64}));
  if (bytes > 0 && fill == Fill::kZeros) std::memset(p, 0, static_cast<size_t>(bytes));
  if (charged) charged->add_bytes(bytes);
  storage_ = std::unique_ptr<float[], Release>(p, Release{std::move(charged), bytes});
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
  return {bytes().data(), shape, dense_strides(shape, layout), dtype_};
}

ConstView Tensor::view(MemoryLayout layout) const {
  const auto shape = logical_shape(shape_, layout);
  return {bytes().data(), shape, dense_strides(shape, layout), dtype_};
}

std::span<std::byte> Tensor::bytes() {
  return {reinterpret_cast<std::byte*>(storage_.get()),
          static_cast<size_t>(numel_ * dtype_size(dtype_))};
}

std::span<const std::byte> Tensor::bytes() const {
  return {reinterpret_cast<const std::byte*>(storage_.get()),
          static_cast<size_t>(numel_ * dtype_size(dtype_))};
}

std::span<float> Tensor::span() {
  CPATTN_CHECK(dtype_ == DType::kF32, ErrorCode::kInvalidArgument,
               "Tensor::span: the tensor holds ", dtype_name(dtype_), ", not fp32");
  return {storage_.get(), static_cast<size_t>(numel_)};
}

std::span<const float> Tensor::span() const {
  CPATTN_CHECK(dtype_ == DType::kF32, ErrorCode::kInvalidArgument,
               "Tensor::span: the tensor holds ", dtype_name(dtype_), ", not fp32");
  return {storage_.get(), static_cast<size_t>(numel_)};
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, storage_.get_deleter().counter.get(), Fill::kNone);
  if (numel_ > 0) std::memcpy(t.data(), data(), bytes().size());
  return t;
}

std::string Tensor::shape_string() const { return cpattn::shape_string(shape_); }

}  // namespace cpattn
