// Tile packing (pack.h). Unit-stride rows (every BSHD/BHSD/SBHD view) take vectorisable copies;
// other strides take the element loop.
#include "kernel/isa/pack.h"

#include <cstring>

#include "kernel/isa/gemm.h"

namespace cpattn::detail::CPATTN_ISA_NS {

// Every helper returns at once for a zero head dim: there is nothing to copy, and the operand
// may then have null data, so not even a row address may be formed.
void pack_rows(const ConstView& x, TileRows t, float mul, float* dst, int64_t ld) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  for (int64_t i = 0; i < t.rows; ++i) {
    const float* src = &x(t.b, t.begin + i, t.h, 0);
    float* row = dst + i * ld;
    if (sd == 1 && mul == 1.0f) {
      std::memcpy(row, src, static_cast<size_t>(dim) * sizeof(float));
    } else if (sd == 1) {
      for (int64_t d = 0; d < dim; ++d) row[d] = mul * src[d];
    } else {
      for (int64_t d = 0; d < dim; ++d) row[d] = mul * src[d * sd];
    }
  }
}

void pack_panels(const ConstView& x, TileRows t, float* dst) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t dim_pad = round_up_nr(dim);
  for (int64_t i = 0; i < t.rows; ++i) {
    const float* src = &x(t.b, t.begin + i, t.h, 0);
    for (int64_t d0 = 0; d0 < dim_pad; d0 += kNr) {
      float* out = dst + d0 * t.rows + i * kNr;  // panel d0 / kNr, row i
      const int64_t n = dim - d0 < kNr ? dim - d0 : kNr;
      if (sd == 1 && n == kNr) {
        std::memcpy(out, src + d0, kNr * sizeof(float));
      } else {
        for (int64_t c = 0; c < kNr; ++c) out[c] = c < n ? src[(d0 + c) * sd] : 0.0f;
      }
    }
  }
}

void pack_panels_transposed(const ConstView& x, TileRows t, float mul, float* dst) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  const int64_t rows_pad = round_up_nr(t.rows);
  for (int64_t i0 = 0; i0 < rows_pad; i0 += kNr) {
    // One panel: kNr rows read in parallel, written d-major so the stores are contiguous.
    float* panel = dst + i0 * dim;
    const int64_t n = t.rows - i0 < kNr ? t.rows - i0 : kNr;
    const float* src[kNr];
    for (int64_t r = 0; r < n; ++r) src[r] = &x(t.b, t.begin + i0 + r, t.h, 0);
    for (int64_t d = 0; d < dim; ++d) {
      float* out = panel + d * kNr;
      for (int64_t r = 0; r < n; ++r) out[r] = mul * src[r][d * sd];
      for (int64_t r = n; r < kNr; ++r) out[r] = 0.0f;
    }
  }
}

void prefetch_rows(const ConstView& x, TileRows t) {
  const int64_t dim = x.shape[3], sd = x.stride[3];
  if (dim == 0) return;
  constexpr int64_t kLineFloats = 16;  // 64-byte cache lines
  const int64_t step = sd == 1 ? kLineFloats : 1;
  for (int64_t i = 0; i < t.rows; ++i) {
    const float* src = &x(t.b, t.begin + i, t.h, 0);
    for (int64_t d = 0; d < dim; d += step) __builtin_prefetch(src + d * sd, 0, 2);
  }
}

void row_dots(const ConstView& dout, const ConstView& out, TileRows t, float* d) {
  constexpr int kSums = 16;
  const int64_t dim = dout.shape[3], sa = dout.stride[3], sb = out.stride[3];
  for (int64_t i = 0; i < t.rows; ++i) {
    float acc[kSums] = {};
    if (dim > 0) {
      const float* a = &dout(t.b, t.begin + i, t.h, 0);
      const float* b = &out(t.b, t.begin + i, t.h, 0);
      int64_t c = 0;
      if (sa == 1 && sb == 1) {
        for (; c + kSums <= dim; c += kSums) {
          for (int l = 0; l < kSums; ++l) acc[l] += a[c + l] * b[c + l];
        }
      }
      for (; c < dim; ++c) acc[c % kSums] += a[c * sa] * b[c * sb];
    }
    for (int w = kSums / 2; w > 0; w /= 2) {
      for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    }
    d[i] = acc[0];
  }
}

}  // namespace cpattn::detail::CPATTN_ISA_NS
