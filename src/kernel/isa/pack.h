// Copies strided [B, S, H, D] tiles into contiguous scratch so the micro-kernel's inner loops are
// unit-stride whatever the caller's layout (BSHD, BHSD, SBHD or any other strides). These are the
// only functions of the kernel that read q, k, v and dout memory (and out, for D_i) and write out,
// dq, dk and dv, so the dtypes (cpattn/dtype.h) are handled here alone: bf16 and fp16 elements
// are widened to fp32 as they are packed (no fp32 copy of a whole input is ever made) and results
// are rounded to the view's dtype as they are stored.
#pragma once

#include <cstdint>

#include "cpattn/tensor.h"

namespace cpattn::detail::CPATTN_ISA_NS {

/// Which rows of which head of a view form a tile: x(b, begin + i, h, :) for i < rows.
struct TileRows {
  int64_t b, h, begin, rows;
};

/// The address of the element `offset` elements past a bf16 or fp16 view's data.
inline const uint16_t* half_at(const ConstView& x, int64_t offset) {
  return reinterpret_cast<const uint16_t*>(x.data) + offset;
}

/// dst[d] = mul * fp16_to_float(src[d]) for d < n (cpattn/dtype.h), a vector of kLanes values at a
/// time (vcvtph2ps on AVX-512, integer lanes on the other copies), bitwise the scalar
/// conversion's for every fp16 value (zero, subnormal, inf, NaN) whatever the MXCSR says.
void widen_fp16_row(const uint16_t* src, int64_t n, float mul, float* dst);

/// Row-major A operand: dst[i * ld + d] = mul * x(b, begin + i, h, d) for d < D (ld >= D). Every
/// function here reads x in its dtype (fp32, bf16, fp16) and converts exactly to fp32 first.
void pack_rows(const ConstView& x, TileRows t, float mul, float* dst, int64_t ld);

/// B operand with the sequence as K and the head dim as N (V for P*V, K for dS*K, Q for dS^T*Q,
/// dO for P^T*dO): panels of kNr dims, dst[(d / kNr) * rows * kNr + i * kNr + d % kNr], dims
/// past D zero-filled up to round_up_nr(D).
void pack_panels(const ConstView& x, TileRows t, float* dst);

/// B operand with the head dim as K and the sequence as N (Q^T for K*Q^T, dO^T for V*dO^T):
/// dst[(i / kNr) * D * kNr + d * kNr + i % kNr] = mul * x(b, begin + i, h, d), rows past t.rows
/// zero-filled up to round_up_nr(t.rows).
void pack_panels_transposed(const ConstView& x, TileRows t, float mul, float* dst);

/// Asks for the tile's rows to be brought into L2 while the current tile computes. With
/// [B, S, H, D] layouts consecutive rows of one head sit a page or more apart, where hardware
/// prefetchers stop, so without this every k/v tile load waits on L3/DRAM latency.
void prefetch_rows(const ConstView& x, TileRows t);

/// x(b, s, h, d) = (accumulate ? x(b, s, h, d) : 0) + mul * src[d] for d < D, computed in fp32
/// and rounded once to x's dtype (round to nearest even: cpattn/dtype.h) when it is bf16 or fp16.
void store_row(const View& x, int64_t b, int64_t s, int64_t h, const float* src, float mul,
               bool accumulate);

/// x(b, s, h, d) = 0 for d < D (any dtype).
void store_zero_row(const View& x, int64_t b, int64_t s, int64_t h);

/// D_i = <dout_i, out_i> for rows i = begin .. begin + n - 1 of head h of batch b, into d[0 .. n)
/// (FlashAttention-2 Alg. 2 line 4). Each row is summed in 16 fixed partial sums (dim d goes to
/// sum d % 16, one FMA chain each) added pairwise at the end: the order does not depend on the
/// lane count, so every FMA path gives the same bits. dout and out may have any dtypes (each
/// element is widened to fp32 first).
void row_dots(const ConstView& dout, const ConstView& out, TileRows t, float* d);

}  // namespace cpattn::detail::CPATTN_ISA_NS
