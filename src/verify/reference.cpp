// The naive attention oracle: one score row at a time, explicit masks, explicit dropout mask from
// its own Philox. Clarity over speed.
#include "verify/reference.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include "cpattn/error.h"

namespace cpattn::reference {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  // Salmon et al. (SC'11), Philox4x32: each round computes hi/lo of M0 * c0 and M1 * c2, then
  // c = {hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)}; the key is bumped by
  // the Weyl constants between rounds (no bump before the first round).
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t prod0 = uint64_t{0xD2511F53u} * uint64_t{c0};
    const uint64_t prod1 = uint64_t{0xCD9E8D57u} * uint64_t{c2};
    const uint32_t hi0 = static_cast<uint32_t>(prod0 >> 32), lo0 = static_cast<uint32_t>(prod0);
    const uint32_t hi1 = static_cast<uint32_t>(prod1 >> 32), lo1 = static_cast<uint32_t>(prod1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {c0, c1, c2, c3};
}

uint32_t dropout_bits(RngState rng, int64_t b, int64_t h, int64_t num_heads_q, int64_t i,
                      int64_t j) {
  const auto lo32 = [](uint64_t x) { return static_cast<uint32_t>(x & 0xFFFFFFFFu); };
  const auto hi32 = [](uint64_t x) { return static_cast<uint32_t>(x >> 32); };
  const std::array<uint32_t, 2> key = {lo32(rng.seed), hi32(rng.seed) ^ hi32(rng.offset)};
  const std::array<uint32_t, 4> counter = {
      lo32(static_cast<uint64_t>(j / 4)), lo32(static_cast<uint64_t>(i)),
      lo32(static_cast<uint64_t>(b * num_heads_q + h)), lo32(rng.offset)};
  return reference::philox4x32_10(counter, key)[static_cast<size_t>(j % 4)];
}

bool dropout_keep(RngState rng, int64_t b, int64_t h, int64_t num_heads_q, int64_t i, int64_t j,
                  float dropout_p) {
  const double u = static_cast<double>(reference::dropout_bits(rng, b, h, num_heads_q, i, j) >> 8) /
                   static_cast<double>(1u << 24);
  return u >= static_cast<double>(dropout_p);
}

namespace {

// MagiAttention's slice mask types on a slice's local row r < lq and column c < lk.
bool slice_sees(const MaskSlice& s, int64_t q_pos, int64_t k_pos) {
  if (q_pos < s.q_begin || q_pos >= s.q_end || k_pos < s.k_begin || k_pos >= s.k_end) {
    return false;
  }
  const int64_t r = q_pos - s.q_begin, c = k_pos - s.k_begin;
  const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
  const bool below = c <= r + (lk - lq);  // the bottom-right aligned lower triangle
  const bool above = c >= r;              // the top-left aligned upper triangle
  switch (s.type) {
    case SliceType::kFull:
      return true;
    case SliceType::kCausal:
      return below;
    case SliceType::kInverseCausal:
      return above;
    case SliceType::kBiCausal:
      return below && above;
  }
  return false;
}

}  // namespace

bool visible(const AttentionParams& params, int64_t q_pos, int64_t k_pos, int64_t q_doc,
             int64_t k_doc) {
  if (q_doc != k_doc) return false;
  if (params.causal && k_pos > q_pos) return false;
  // Differences of positions (both >= 0) cannot overflow; q_pos + window_right could.
  if (params.window_left >= 0 && q_pos - k_pos > params.window_left) return false;
  if (params.window_right >= 0 && k_pos - q_pos > params.window_right) return false;
  if (params.slices.empty()) return true;
  for (const MaskSlice& s : params.slices) {
    if (slice_sees(s, q_pos, k_pos)) return true;
  }
  return false;
}

double softmax_scale(const Problem& problem) {
  if (problem.exact_scale) return *problem.exact_scale;
  if (problem.params.softmax_scale) return static_cast<double>(*problem.params.softmax_scale);
  return 1.0 / std::sqrt(static_cast<double>(problem.dims.Dqk));
}

namespace {

void check_problem(const Problem& p, bool with_backward) {
  const Dims& d = p.dims;
  const auto n = [](std::initializer_list<int64_t> sizes) {
    size_t total = 1;
    for (int64_t s : sizes) total *= static_cast<size_t>(s);
    return total;
  };
  CPATTN_CHECK(d.B >= 0 && d.Sq >= 0 && d.Sk >= 0 && d.Hq >= 1 && d.Hkv >= 1 && d.Dqk >= 1 &&
                   d.Dv >= 1 && d.Hq % d.Hkv == 0,
               ErrorCode::kInvalidArgument, "reference: invalid dims B=", d.B, " Sq=", d.Sq,
               " Sk=", d.Sk, " Hq=", d.Hq, " Hkv=", d.Hkv, " Dqk=", d.Dqk, " Dv=", d.Dv);
  const auto code = ErrorCode::kShapeMismatch;
  CPATTN_CHECK_EQ(p.q.size(), n({d.B, d.Sq, d.Hq, d.Dqk}), code, "reference: q length");
  CPATTN_CHECK_EQ(p.k.size(), n({d.B, d.Sk, d.Hkv, d.Dqk}), code, "reference: k length");
  CPATTN_CHECK_EQ(p.v.size(), n({d.B, d.Sk, d.Hkv, d.Dv}), code, "reference: v length");
  CPATTN_CHECK_EQ(p.q_pos.size(), static_cast<size_t>(d.Sq), code, "reference: q_pos length");
  CPATTN_CHECK_EQ(p.k_pos.size(), static_cast<size_t>(d.Sk), code, "reference: k_pos length");
  if (!p.q_doc.empty() || !p.k_doc.empty()) {
    CPATTN_CHECK_EQ(p.q_doc.size(), static_cast<size_t>(d.Sq), code, "reference: q_doc length");
    CPATTN_CHECK_EQ(p.k_doc.size(), static_cast<size_t>(d.Sk), code, "reference: k_doc length");
  }
  if (with_backward) {
    CPATTN_CHECK_EQ(p.dout.size(), n({d.B, d.Sq, d.Hq, d.Dv}), code, "reference: dout length");
  }
  if (!p.dense_mask.empty()) {
    CPATTN_CHECK_EQ(p.dense_mask.size(), n({d.Sq, d.Sk}), code, "reference: dense_mask length");
  }
  if (!p.params.sink.empty()) {
    CPATTN_CHECK_EQ(p.params.sink.size(), static_cast<size_t>(d.Hq), code, "reference: sinks");
  }
  if (!p.params.alibi_slopes.empty()) {
    CPATTN_CHECK_EQ(p.params.alibi_slopes.size(), static_cast<size_t>(d.Hq), code,
                    "reference: alibi_slopes");
  }
}

// sum_d |a[d] * b[d]| in double: the magnitude of dot(a, b), the size its rounding errors scale
// with, cancellation included.
template <typename T>
double abs_dot(const T* a, const T* b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d) sum += std::fabs(static_cast<double>(a[d] * b[d]));
  return sum;
}

// sum_d a[d] * b[d], one sum in order: each element of a plain implementation's products is
// accumulated this way (a GEMM's inner loop keeps one accumulator per element over the whole
// head dim), and the accuracy rule (reference_case.h) measures the kernel against such a one.
// Partial sums would make large scores about 2x more accurate than that (measured: with four of
// them the kernel's out was up to 5x the plain error for scores in the tens), and the rule
// tighter than "within 2x of a plain implementation".
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// y += alpha * x
template <typename T>
void axpy(T alpha, const T* x, T* y, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

template <typename T>
std::vector<T> cast_to(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

template <typename T>
Outputs attention_impl(const Problem& problem, bool with_backward, Outputs* magnitudes) {
  with_backward = with_backward && !problem.dout.empty();
  check_problem(problem, with_backward);
  const Dims& d = problem.dims;
  const std::vector<T> q = cast_to<T>(problem.q), k = cast_to<T>(problem.k),
                       v = cast_to<T>(problem.v), dout = cast_to<T>(problem.dout);
  const T scale = static_cast<T>(softmax_scale(problem));
  const float p_drop = problem.params.dropout_p;
  const T keep_scale =
      T{1} / (T{1} - static_cast<T>(problem.exact_dropout_p.value_or(static_cast<double>(p_drop))));
  const bool docs = !problem.q_doc.empty();
  const int64_t group = d.Hq / d.Hkv;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const AttentionParams& params = problem.params;
  const T softcap = static_cast<T>(params.softcap);
  const bool sinks = !params.sink.empty();

  std::vector<T> out(static_cast<size_t>(d.B * d.Sq * d.Hq * d.Dv), T{0});
  std::vector<T> lse(static_cast<size_t>(d.B * d.Hq * d.Sq), neg_inf);
  std::vector<T> dq, dk, dv, dsink;
  if (with_backward) {
    dq.assign(q.size(), T{0});
    dk.assign(k.size(), T{0});
    dv.assign(v.size(), T{0});
    if (sinks) dsink.assign(static_cast<size_t>(d.Hq), T{0});
  }
  // Magnitudes: the same sums over absolute values of their terms (see reference.h).
  Outputs mag;
  if (magnitudes != nullptr) {
    mag.out.assign(out.size(), 0.0);
    mag.lse.assign(lse.size(), 0.0);
    if (with_backward) {
      mag.dq.assign(q.size(), 0.0);
      mag.dk.assign(k.size(), 0.0);
      mag.dv.assign(v.size(), 0.0);
      if (sinks) mag.dsink.assign(static_cast<size_t>(d.Hq), 0.0);
    }
  }
  const double abs_scale = std::fabs(static_cast<double>(scale));
  // Offsets of row (b, s, h) in a BSHD tensor with H heads of width D.
  const auto at = [](int64_t b, int64_t s, int64_t h, int64_t S, int64_t H, int64_t D) {
    return static_cast<size_t>(((b * S + s) * H + h) * D);
  };
  std::vector<T> score(static_cast<size_t>(d.Sk)), prob(static_cast<size_t>(d.Sk)),
      zmask(static_cast<size_t>(d.Sk)), capped(static_cast<size_t>(d.Sk));
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.Hq; ++h) {
      const int64_t hk = h / group;
      const T slope = params.alibi_slopes.empty() ? T{0} : static_cast<T>(params.alibi_slopes[h]);
      for (int64_t i = 0; i < d.Sq; ++i) {
        const T* qi = &q[at(b, i, h, d.Sq, d.Hq, d.Dqk)];
        T row_max = neg_inf;
        // A NaN score (NaN in q_i or a visible k_j) makes the whole row NaN, as it does in
        // plain softmax arithmetic; the comparisons below alone would skip it.
        bool row_nan = false;
        for (int64_t j = 0; j < d.Sk; ++j) {
          const bool vis = problem.dense_mask.empty()
                               ? visible(params, problem.q_pos[i], problem.k_pos[j],
                                         docs ? problem.q_doc[i] : 0, docs ? problem.k_doc[j] : 0)
                               : problem.dense_mask[static_cast<size_t>(i * d.Sk + j)] != 0;
          if (!vis) {
            score[j] = neg_inf;
            continue;
          }
          T s = scale * dot(qi, &k[at(b, j, hk, d.Sk, d.Hkv, d.Dqk)], d.Dqk);
          if (softcap > T{0}) {
            const T t = std::tanh(s / softcap);
            capped[j] = T{1} - t * t;  // d(softcap * tanh(s / softcap)) / ds
            s = softcap * t;
          }
          const T distance = static_cast<T>(problem.q_pos[i] > problem.k_pos[j]
                                                ? problem.q_pos[i] - problem.k_pos[j]
                                                : problem.k_pos[j] - problem.q_pos[i]);
          score[j] = s - slope * distance;
          if (std::isnan(score[j])) row_nan = true;
          if (score[j] > row_max) row_max = score[j];
        }
        if (row_nan) row_max = std::numeric_limits<T>::quiet_NaN();
        const size_t row = static_cast<size_t>((b * d.Hq + h) * d.Sq + i);
        // The sink joins the row's normaliser once: max and sum over {sink} and the visible keys.
        const T sink = sinks ? static_cast<T>(params.sink[h]) : neg_inf;
        if (row_max == neg_inf && !sinks) continue;  // empty row: out 0, lse -inf, no gradient
        const T m = row_nan || row_max > sink ? row_max : sink;
        T sum = sinks ? std::exp(sink - m) : T{0};
        for (int64_t j = 0; j < d.Sk; ++j) sum += std::exp(score[j] - m);
        lse[row] = m + std::log(sum);
        if (magnitudes != nullptr) {
          mag.lse[row] = std::fabs(static_cast<double>(m)) + std::fabs(std::log(double(sum)));
        }
        if (row_max == neg_inf) continue;  // no visible key: out 0, lse = sink, no gradient
        T* oi = &out[at(b, i, h, d.Sq, d.Hq, d.Dv)];
        for (int64_t j = 0; j < d.Sk; ++j) {
          // A masked key (-inf) gets 0 in a NaN row too: it never met the row.
          prob[j] = score[j] == neg_inf ? T{0} : std::exp(score[j] - m) / sum;
          zmask[j] = p_drop == 0.0f ? T{1}
                     : reference::dropout_keep(problem.rng, b, h, d.Hq, problem.q_pos[i],
                                               problem.k_pos[j], p_drop)
                         ? keep_scale
                         : T{0};
          axpy(zmask[j] * prob[j], &v[at(b, j, hk, d.Sk, d.Hkv, d.Dv)], oi, d.Dv);
          if (magnitudes != nullptr) {
            const double zp = static_cast<double>(zmask[j] * prob[j]);
            const T* vj = &v[at(b, j, hk, d.Sk, d.Hkv, d.Dv)];
            double* mi = &mag.out[at(b, i, h, d.Sq, d.Hq, d.Dv)];
            for (int64_t e = 0; e < d.Dv; ++e) mi[e] += zp * std::fabs(static_cast<double>(vj[e]));
          }
        }
        if (!with_backward) continue;
        const T* doi = &dout[at(b, i, h, d.Sq, d.Hq, d.Dv)];
        const T delta = dot(doi, oi, d.Dv);
        // D_i's magnitude: D_i = sum_j Z P_ij <dout_i, v_j>, so sum_e |dout_ie| magnitude_out_ie
        // (>= sum_e |dout_ie out_ie|). Errors in out (a bf16 forward's rounding of out or of P)
        // move D_i by a part of it, which may far exceed a cancelling |D_i|.
        double delta_mag = 0.0;
        if (magnitudes != nullptr) {
          const double* mi = &mag.out[at(b, i, h, d.Sq, d.Hq, d.Dv)];
          for (int64_t e = 0; e < d.Dv; ++e) delta_mag += std::fabs(doi[e]) * mi[e];
        }
        if (sinks) {
          const T p_sink = std::exp(sink - lse[row]);
          dsink[h] -= p_sink * delta;
          if (magnitudes != nullptr) {
            mag.dsink[static_cast<size_t>(h)] += static_cast<double>(p_sink) * delta_mag;
          }
        }
        T* dqi = &dq[at(b, i, h, d.Sq, d.Hq, d.Dqk)];
        for (int64_t j = 0; j < d.Sk; ++j) {
          if (prob[j] == T{0}) continue;
          const size_t kj = at(b, j, hk, d.Sk, d.Hkv, d.Dqk), vj = at(b, j, hk, d.Sk, d.Hkv, d.Dv);
          const T dp = zmask[j] * dot(doi, &v[vj], d.Dv);
          const T ds = prob[j] * (dp - delta) * (softcap > T{0} ? capped[j] : T{1});
          axpy(zmask[j] * prob[j], doi, &dv[vj], d.Dv);
          axpy(scale * ds, &k[kj], dqi, d.Dqk);
          axpy(scale * ds, qi, &dk[kj], d.Dqk);
          if (magnitudes != nullptr) {
            // dS = P (dP - D) cancels; its magnitude is that of the two terms.
            const double zp = static_cast<double>(zmask[j] * prob[j]);
            const double dp_mag = static_cast<double>(zmask[j]) * abs_dot(doi, &v[vj], d.Dv);
            const double ds_mag = static_cast<double>(prob[j]) * (dp_mag + delta_mag) *
                                  (softcap > T{0} ? static_cast<double>(capped[j]) : 1.0);
            const size_t qrow = at(b, i, h, d.Sq, d.Hq, d.Dqk);
            for (int64_t e = 0; e < d.Dv; ++e) mag.dv[vj + e] += zp * std::fabs(doi[e]);
            for (int64_t e = 0; e < d.Dqk; ++e) {
              mag.dq[qrow + e] += abs_scale * ds_mag * std::fabs(k[kj + e]);
              mag.dk[kj + e] += abs_scale * ds_mag * std::fabs(qi[e]);
            }
          }
        }
      }
    }
  }
  if (magnitudes != nullptr) *magnitudes = std::move(mag);
  const auto widen = [](const std::vector<T>& x) {
    return std::vector<double>(x.begin(), x.end());
  };
  return {widen(out), widen(lse), widen(dq), widen(dk), widen(dv), widen(dsink)};
}

}  // namespace

Outputs attention(const Problem& problem, bool with_backward, Outputs* magnitudes) {
  return attention_impl<double>(problem, with_backward, magnitudes);
}

Outputs attention_fp32(const Problem& problem, bool with_backward) {
  return attention_impl<float>(problem, with_backward, nullptr);
}

}  // namespace cpattn::reference
