// Strided 4-D views (the kernel's argument type) and Tensor, cpattn's owning, counted buffer of
// fp32, bf16 or fp16 elements (cpattn/dtype.h).
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cpattn/dtype.h"
#include "cpattn/memory.h"

namespace cpattn {

/// A non-owning 4-D strided view. Logical dimensions are [B, S, H, D] (batch, sequence, heads,
/// head dim); strides are in elements, so BSHD, BHSD (BNSD) and SBHD memory are all views with
/// different strides. T is float (a writable view) or const float (a read-only one).
///
/// The view carries its dtype: `data` is the byte address of element (0, 0, 0, 0) and `dtype`
/// says what the memory holds (fp32, bf16 or fp16; strides count elements of that dtype), the
/// way FlashAttention's parameters pass a `void*` with a dtype. Only an fp32 view hands out a
/// float pointer (f32(), operator()); elements of any dtype are read and written through
/// read_element / write_element (or offset() and the dtype.h conversions).
template <typename T>
struct StridedView {
  static_assert(std::is_same_v<std::remove_const_t<T>, float>);
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;

  Byte* data = nullptr;             ///< element (0, 0, 0, 0); any alignment for 16-bit dtypes
  std::array<int64_t, 4> shape{};   ///< [B, S, H, D]
  std::array<int64_t, 4> stride{};  ///< elements between consecutive b, s, h, d
  DType dtype = DType::kF32;        ///< element type of the memory at data

  StridedView() = default;
  /// An fp32 view of the floats at `p`.
  StridedView(T* p, const std::array<int64_t, 4>& shape_in, const std::array<int64_t, 4>& stride_in)
      : data(reinterpret_cast<Byte*>(p)), shape(shape_in), stride(stride_in) {}
  /// A view of the `dtype` elements at `p`.
  StridedView(Byte* p, const std::array<int64_t, 4>& shape_in,
              const std::array<int64_t, 4>& stride_in, DType dtype_in)
      : data(p), shape(shape_in), stride(stride_in), dtype(dtype_in) {}

  /// The floats of an fp32 view (dtype == kF32, asserted in debug builds: what a 16-bit view
  /// holds is not float).
  T* f32() const {
    assert(dtype == DType::kF32);
    return reinterpret_cast<T*>(data);
  }
  /// Element (b, s, h, d) of an fp32 view; no bounds check.
  T& operator()(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return f32()[offset(b, s, h, d)];
  }
  /// Elements from data to element (b, s, h, d) (any dtype).
  int64_t offset(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return b * stride[0] + s * stride[1] + h * stride[2] + d * stride[3];
  }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  /// Implicit conversion to a read-only view.
  operator StridedView<const T>() const { return {data, shape, stride, dtype}; }
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

/// Checks an operand that will be read: every dim and stride >= 0, and, when it has elements, an
/// element count and a last element's byte offset that fit in int64 (Error(kShapeMismatch)), and
/// data present (Error(kInvalidArgument)); messages start with `name`.
void check_readable(StridedView<const float> view, std::string_view name);
/// check_readable plus view.shape == expected: Error(kShapeMismatch) "<name> must have shape
/// <dims> = [..], got [..]", e.g. dims = "[B, Sq, Hq, Dqk]".
void check_view(StridedView<const float> view, std::string_view name, std::string_view dims,
                const std::array<int64_t, 4>& expected);

/// Element (b, s, h, d) of a view of any dtype, as fp32 (exact); no bounds check.
float read_element(StridedView<const float> view, int64_t b, int64_t s, int64_t h, int64_t d);
/// Stores x into element (b, s, h, d) of a view of any dtype, rounding to nearest even for bf16
/// and fp16 (dtype.h: store_from_float); no bounds check.
void write_element(StridedView<float> view, int64_t b, int64_t s, int64_t h, int64_t d, float x);

/// Copies every element of src into dst (same shape, any strides on either side; they must not
/// overlap), converting between dtypes: exact when dst is as wide as src, rounded to nearest even
/// (dtype.h) when dst is bf16 or fp16 and src is wider or another 16-bit type. Throws
/// Error(kShapeMismatch) when the shapes differ.
void copy_view(StridedView<const float> src, StridedView<float> dst);

class Tensor;
/// A dense copy of `src` stored in `layout` order (charged to `counter`, process_memory() when
/// null): Tensor shape storage_shape(src.shape, layout), viewed back with view(layout), of
/// src's dtype.
Tensor dense_copy(StridedView<const float> src, MemoryLayout layout = MemoryLayout::kBSHD,
                  MemoryCounter* counter = nullptr);

/// A dense copy of `src` converted to `dtype` (copy_view's rounding), stored in `layout` order.
Tensor dense_copy(StridedView<const float> src, DType dtype, MemoryLayout layout,
                  MemoryCounter* counter = nullptr);

/// An owning, contiguous buffer of fp32 (default), bf16 or fp16 elements with a shape (any rank).
/// Its bytes are counted in a MemoryCounter (process_memory() unless another is given) from
/// allocation until destruction; the tensor holds a reference to that counter until then.
/// Move-only: copies are explicit (clone()) so a hidden duplicate of a big activation cannot
/// happen.
class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled fp32 tensor of `shape`; throws Error(kInvalidArgument) on a negative dimension.
  explicit Tensor(std::vector<int64_t> shape, MemoryCounter* counter = nullptr);
  /// Zero-filled tensor of `shape` with elements of `dtype` (dtype_size(dtype) bytes each).
  Tensor(std::vector<int64_t> shape, DType dtype, MemoryCounter* counter = nullptr);
  /// A tensor as Tensor(shape, dtype, counter) but with its elements left unset: for an output
  /// the next call overwrites whole, where the zero fill would be one more pass over memory.
  /// Reading an element before it is written reads an indeterminate value. Throws like the
  /// constructor.
  static Tensor uninitialized(std::vector<int64_t> shape, DType dtype = DType::kF32,
                              MemoryCounter* counter = nullptr);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  /// The storage; for a bf16 or fp16 tensor the address of its 2-byte elements cast to float*
  /// (read it through view(), or bytes()).
  float* data() { return storage_.get(); }
  const float* data() const { return storage_.get(); }
  /// The storage as bytes: numel() * dtype_size(dtype()) of them.
  std::span<std::byte> bytes();
  std::span<const std::byte> bytes() const;
  /// The elements of an fp32 tensor (numel() floats). Throws Error(kInvalidArgument) for
  /// another dtype.
  std::span<float> span();
  std::span<const float> span() const;

  /// A rank-4 tensor seen as [B, S, H, D] stored in `layout` order (shape_ holds the storage
  /// order's dims, e.g. [B, H, S, D] for kBHSD), of the tensor's dtype. Throws if the rank is
  /// not 4.
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
  enum class Fill { kZeros, kNone };
  Tensor(std::vector<int64_t> shape, DType dtype, MemoryCounter* counter, Fill fill);

  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  std::unique_ptr<float[], Release> storage_{nullptr, Release{}};
};

}  // namespace cpattn
