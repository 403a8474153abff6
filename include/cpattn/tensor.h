// Strided 4-D views (the kernel's argument type) and Tensor, cpattn's owning, counted fp32 buffer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cpattn/memory.h"

namespace cpattn {

/// A non-owning 4-D strided view. Logical dimensions are [B, S, H, D] (batch, sequence, heads,
/// head dim); strides are in elements, so BSHD, BHSD (BNSD) and SBHD memory are all views with
/// different strides. T is float or const float.
template <typename T>
struct StridedView {
  T* data = nullptr;
  std::array<int64_t, 4> shape{};   ///< [B, S, H, D]
  std::array<int64_t, 4> stride{};  ///< elements between consecutive b, s, h, d

  /// Element (b, s, h, d); no bounds check.
  T& operator()(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return data[b * stride[0] + s * stride[1] + h * stride[2] + d * stride[3]];
  }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  /// Implicit conversion float -> const float view.
  operator StridedView<const T>() const { return {data, shape, stride}; }
};
using View = StridedView<float>;
using ConstView = StridedView<const float>;

/// Memory orders a [B, S, H, D] tensor can be stored in.
enum class MemoryLayout {
  kBSHD,  ///< batch, sequence, head, dim (FlashAttention's default)
  kBHSD,  ///< batch, head, sequence, dim (a.k.a. BNSD; PyTorch SDPA)
  kSBHD,  ///< sequence, batch, head, dim (Megatron)
};
const char* memory_layout_name(MemoryLayout layout) noexcept;

/// Strides (elements) of a densely packed [B, S, H, D] tensor stored in `layout` order.
std::array<int64_t, 4> dense_strides(const std::array<int64_t, 4>& shape, MemoryLayout layout);

/// The storage-order dims of a logical [B, S, H, D] shape stored in `layout` order, e.g.
/// [B, H, S, D] for kBHSD (the shape of the Tensor that holds it).
std::vector<int64_t> storage_shape(const std::array<int64_t, 4>& shape, MemoryLayout layout);

/// "[2, 1024, 8, 64]": the one format of shapes in messages.
std::string shape_string(std::span<const int64_t> dims);

/// Checks an operand that will be read: every dim and stride >= 0 (Error(kShapeMismatch)), data
/// present when it has elements (Error(kInvalidArgument)); messages start with `name`.
void check_readable(StridedView<const float> view, std::string_view name);
/// check_readable plus view.shape == expected: Error(kShapeMismatch) "<name> must have shape
/// <dims> = [..], got [..]", e.g. dims = "[B, Sq, Hq, Dqk]".
void check_view(StridedView<const float> view, std::string_view name, std::string_view dims,
                const std::array<int64_t, 4>& expected);

/// Copies every element of src into dst (same shape, any strides on either side; they must not
/// overlap). Throws Error(kShapeMismatch) when the shapes differ.
void copy_view(StridedView<const float> src, StridedView<float> dst);

class Tensor;
/// A dense copy of `src` stored in `layout` order (charged to `counter`, process_memory() when
/// null): Tensor shape storage_shape(src.shape, layout), viewed back with view(layout).
Tensor dense_copy(StridedView<const float> src, MemoryLayout layout = MemoryLayout::kBSHD,
                  MemoryCounter* counter = nullptr);

/// An owning, contiguous fp32 buffer with a shape (any rank). Its bytes are counted in a
/// MemoryCounter (process_memory() unless another is given) from allocation until destruction;
/// the tensor holds a reference to that counter until then.
/// Move-only: copies are explicit (clone()) so a hidden duplicate of a big activation cannot
/// happen.
class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled tensor of `shape`; throws Error(kInvalidArgument) on a negative dimension.
  explicit Tensor(std::vector<int64_t> shape, MemoryCounter* counter = nullptr);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const { return numel_; }
  float* data() { return storage_.get(); }
  const float* data() const { return storage_.get(); }
  std::span<float> span() { return {storage_.get(), static_cast<size_t>(numel_)}; }
  std::span<const float> span() const { return {storage_.get(), static_cast<size_t>(numel_)}; }

  /// A rank-4 tensor seen as [B, S, H, D] stored in `layout` order (shape_ holds the storage
  /// order's dims, e.g. [B, H, S, D] for kBHSD). Throws if the rank is not 4.
  View view(MemoryLayout layout = MemoryLayout::kBSHD);
  ConstView view(MemoryLayout layout = MemoryLayout::kBSHD) const;

  Tensor clone() const;
  /// "[2, 1024, 8, 64]"
  std::string shape_string() const;

 private:
  // Frees the buffer and releases its bytes from the counter (which it keeps alive till then).
  struct Release {
    std::shared_ptr<MemoryCounter> counter;
    int64_t bytes = 0;
    void operator()(float* p) const noexcept;
  };
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::unique_ptr<float[], Release> storage_{nullptr, Release{}};
};

}  // namespace cpattn
