// Tensor conversions of the torch binding (torch_views.h).
#include "torch_views.h"

#include <string>
#include <vector>

#include "cpattn/error.h"

namespace cpattn::torch_binding {

namespace {

void check_cpu(const at::Tensor& t, const char* name) {
  CPATTN_CHECK(t.defined(), ErrorCode::kInvalidArgument, name, " is not a tensor");
  CPATTN_CHECK(t.device().is_cpu(), ErrorCode::kInvalidArgument, name,
               " must be a CPU tensor, got one on ", t.device().str());
}

void check_float_cpu(const at::Tensor& t, const char* name) {
  check_cpu(t, name);
  CPATTN_CHECK(t.scalar_type() == at::kFloat, ErrorCode::kInvalidArgument, name,
               " must be float32, got ", c10::toString(t.scalar_type()));
}

// The cpattn dtype of a float32, bfloat16 or float16 tensor (Error(kInvalidArgument) otherwise).
DType dtype_of(const at::Tensor& t, const char* name) {
  check_cpu(t, name);
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::kF32;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kHalf:
      return DType::kF16;
    default:
      break;
  }
  throw Error(ErrorCode::kInvalidArgument,
              detail::str_cat(name, " must be float32, bfloat16 or float16, got ",
                              c10::toString(t.scalar_type())));
}

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return at::kFloat;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kF16:
      return at::kHalf;
  }
  return at::kFloat;
}

std::string sizes_text(const at::Tensor& t) {
  return shape_string(std::span<const int64_t>(t.sizes().data(), t.sizes().size()));
}

std::vector<int64_t> dense_strides_of(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

}  // namespace

ConstView view_of(const at::Tensor& t, const char* name) {
  const DType dtype = dtype_of(t, name);
  CPATTN_CHECK(t.dim() == 4, ErrorCode::kShapeMismatch, name,
               " must have 4 dimensions [B, S, H, D], got ", t.dim(), " (shape ", sizes_text(t),
               ")");
  ConstView v;
  v.data = static_cast<const std::byte*>(t.data_ptr());  // the view carries t's dtype
  v.dtype = dtype;
  for (int i = 0; i < 4; ++i) {
    v.shape[static_cast<size_t>(i)] = t.size(i);
    v.stride[static_cast<size_t>(i)] = t.stride(i);
  }
  check_readable(v, name);
  return v;
}

std::span<const float> floats_of(const at::Tensor& t, const char* name, int64_t dims) {
  check_float_cpu(t, name);
  CPATTN_CHECK(t.dim() == dims && t.is_contiguous(), ErrorCode::kShapeMismatch, name,
               " must be a contiguous tensor of ", dims, " dimensions, got shape ", sizes_text(t));
  return {t.data_ptr<float>(), static_cast<size_t>(t.numel())};
}

at::Tensor torch_over(const std::shared_ptr<void>& owner, const float* data,
                      std::span<const int64_t> shape, DType dtype) {
  const std::vector<int64_t> sizes(shape.begin(), shape.end());
  // torch asks for a mutable pointer; the tensor is the caller's to use as it pleases.
  return at::from_blob(
      const_cast<float*>(data), sizes, dense_strides_of(shape), [owner](void*) {},
      at::TensorOptions().dtype(scalar_type_of(dtype)));
}

at::Tensor torch_from(Tensor&& t) {
  auto owned = std::make_shared<Tensor>(std::move(t));
  return torch_over(owned, owned->data(), owned->shape(), owned->dtype());
}

}  // namespace cpattn::torch_binding
