// The bf16 products of the AVX-512-BF16 copy (CPATTN_ISA_BF16_DOT; docs/design.md section 3.1):
// tile products C (+)= A * B whose A and B are bf16 and whose C is fp32, on vdpbf16ps. One
// instruction takes, in every fp32 lane n, a pair of bf16 values of A's row (k = 2k2, 2k2 + 1)
// and the matching pair of B's column, and adds both products to C in fp32 (Intel SDM: the
// product of two bf16 values is exact in fp32; each addition rounds to nearest even; bf16
// denormal inputs count as zero and denormal results flush to zero). So every operand here is
// packed in k pairs: a 32-bit word holds element k = 2k2 in its low half and 2k2 + 1 in its high
// half, and an odd K is padded with a zero high half.
//
// The packers take bf16 views only (the caller checks the dtype) and copy their bits unchanged:
// no conversion, no rounding. pairs_down_rows and pairs_along_rows are the only places where fp32
// values become bf16 (P before P V, and the backward's P, Z P and dS before their products), each
// rounded to nearest even.
#pragma once

#include <cstdint>

#include "cpattn/tensor.h"
#include "kernel/isa/gemm.h"
#include "kernel/isa/pack.h"

#if CPATTN_ISA_BF16_DOT

namespace cpattn::detail::CPATTN_ISA_NS {

/// Pairs of K: the number of 32-bit words a packed K-long bf16 row takes, ceil(k / 2).
inline int64_t k_pairs(int64_t k) { return (k + 1) / 2; }

/// A[m][2 k2 .. 2 k2 + 1] = word a[m * row_stride + k2 * k_stride] (low half first).
struct PairsA {
  const uint32_t* data;
  int64_t row_stride;  ///< in words
  int64_t k_stride;    ///< between pairs of k, in words
};

/// Packed-B pairs: panel p holds the word (B[2 k2][n], B[2 k2 + 1][n]) of column n = kNr p + c
/// at b[p * k * kNr + k2 * kNr + c]; columns past the real N are zero words.
struct PairsB {
  const uint32_t* data;
  int64_t k;  ///< word rows per panel: k_pairs of the product's K
  /// Panel n0 / kNr (n0 a multiple of kNr): n0 / kNr panels of k * kNr words before it.
  const uint32_t* panel(int64_t n0) const { return data + n0 * k; }
};

/// C[m][n] = (accumulate ? C[m][n] * r_m : 0) + sum_{k < K} A[m][k] * B[k][n] for m < M, n < N
/// (N a multiple of kNr), K = 2 b.k with the zero pads, r_m = row_scale[m] (1 when null), as
/// gemm_tile; fp32 C, row-major with leading dimension ldc. The sum runs over k in pair order
/// (k = 2k2 + 1 then 2k2 within a word, pairs in order).
void gemm_tile_bf16(int64_t m, int64_t n, PairsA a, PairsB b, float* c, int64_t ldc,
                    bool accumulate, const float* row_scale = nullptr);

/// Row-major pairs (A operand, K = the head dim): dst[i * ld + k2] = (x(b, begin + i, h, 2 k2),
/// x(.., 2 k2 + 1)) for k2 < k_pairs(D), ld >= k_pairs(D) words, the high half 0 past D.
void pack_pair_rows(const ConstView& x, TileRows t, uint32_t* dst, int64_t ld);

/// B pairs with the head dim as K and the sequence as N (Q^T for K Q^T, dO^T for V dO^T):
/// the word (x(i, 2 k2), x(i, 2 k2 + 1)) of row i at dst[(i / kNr) * k_pairs(D) * kNr +
/// k2 * kNr + i % kNr], rows past t.rows zero up to round_up_nr(t.rows).
void pack_pair_panels_transposed(const ConstView& x, TileRows t, uint32_t* dst);

/// B pairs with the sequence as K and the head dim as N (V for P V): the word (x(2 k2, d),
/// x(2 k2 + 1, d)) at dst[(d / kNr) * k_pairs(rows) * kNr + k2 * kNr + d % kNr], the high half 0
/// past the last row, dims past D zero up to round_up_nr(D).
void pack_pair_panels(const ConstView& x, TileRows t, uint32_t* dst);

/// Pairs down the rows of the fp32 tile st[j * ld + i] (j < nk rows, i < n columns, n a multiple
/// of kLanes), for a product whose K runs down st's rows (P V and dS K, st = P^T or dS^T): word
/// (bf16(st[2 k2][i]), bf16(st[2 k2 + 1][i])) at dst[k2 * ld + i] (a missing odd last row gives
/// 0). dst may be st's own memory (in place) or a buffer of k_pairs(nk) * ld words. Returns the
/// operand A[i][k2]: row stride 1, k2 stride ld.
PairsA pairs_down_rows(const float* st, int64_t nk, int64_t n, int64_t ld, uint32_t* dst);

/// Pairs along the rows of the same tile, in place, for a product whose K runs along them
/// ((Z P)^T dO and dS^T Q): word (bf16(st[j][2 k2]), bf16(st[j][2 k2 + 1])) at word j * ld + k2
/// of st's memory for k2 < n / 2 (n a multiple of 2 kLanes). Returns A[j][k2]: row stride ld,
/// k2 stride 1.
PairsA pairs_along_rows(float* st, int64_t nk, int64_t n, int64_t ld);

}  // namespace cpattn::detail::CPATTN_ISA_NS

#endif  // CPATTN_ISA_BF16_DOT
