// Verification cases: spec -> random problem -> kernel run in a layout -> error row vs the oracle.
#include "verify/reference_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <utility>

#include "cpattn/error.h"
#include "cpattn/kernel.h"
#include "cpattn/varlen.h"

namespace cpattn::reference {

const char* mask_kind_name(MaskKind kind) noexcept {
  switch (kind) {
    case MaskKind::kNone:
      return "Full";
    case MaskKind::kCausal:
      return "Causal";
    case MaskKind::kWindow:
      return "Window";
    case MaskKind::kCausalWindow:
      return "CausalWindow";
    case MaskKind::kDocs:
      return "Docs";
    case MaskKind::kDocsCausal:
      return "DocsCausal";
    case MaskKind::kPrefixLmSlices:
      return "PrefixLm";
    case MaskKind::kDocSlices:
      return "DocSlices";
    case MaskKind::kSharedPrefixSlices:
      return "SharedPrefix";
    case MaskKind::kRandomSlices:
      return "RandomSlices";
  }
  return "?";
}

const char* position_kind_name(PositionKind kind) noexcept {
  switch (kind) {
    case PositionKind::kContiguous:
      return "Contiguous";
    case PositionKind::kZigzag:
      return "Zigzag";
    case PositionKind::kStriped:
      return "Striped";
  }
  return "?";
}

std::string case_name(const CaseSpec& spec) {
  const Dims& d = spec.dims;
  std::string heads = d.Hq == d.Hkv ? "MHA" + std::to_string(d.Hq)
                                    : "GQA" + std::to_string(d.Hq) + "x" + std::to_string(d.Hkv);
  char p[32];
  std::snprintf(p, sizeof(p), "%g", static_cast<double>(spec.dropout_p));
  std::string drop = p;
  std::replace(drop.begin(), drop.end(), '.', 'p');
  std::string name = std::string(mask_kind_name(spec.mask)) + "_" + heads + "_Sq" +
                     std::to_string(d.Sq) + "_Sk" + std::to_string(d.Sk) + "_D" +
                     std::to_string(d.Dqk) + "x" + std::to_string(d.Dv) + "_p" + drop + "_" +
                     memory_layout_name(spec.layout);
  if (spec.positions != PositionKind::kContiguous) {
    name += std::string("_") + position_kind_name(spec.positions);
  }
  if (d.B != 1) name += "_B" + std::to_string(d.B);
  if (spec.dtype != DType::kF32) name += std::string("_") + dtype_name(spec.dtype);
  if (spec.sink) name += "_sink";
  if (spec.softcap > 0.0f) {
    std::snprintf(p, sizeof(p), "%g", static_cast<double>(spec.softcap));
    std::string cap = p;
    for (char& ch : cap) ch = ch == '.' ? 'p' : ch == '+' ? 'x' : ch == '-' ? 'm' : ch;
    name += "_cap" + cap;
  }
  if (spec.alibi) name += "_alibi";
  if (!spec.slices.empty()) name += "_slices" + std::to_string(spec.slices.size());
  return name;
}

std::array<std::vector<int64_t>, 2> make_positions(PositionKind kind, int64_t sq, int64_t sk,
                                                   uint64_t seed) {
  const int64_t n = std::max(sq, sk);
  std::array<std::vector<int64_t>, 2> pos;
  const std::array<int64_t, 2> len = {sq, sk};
  for (size_t t = 0; t < 2; ++t) {
    std::vector<int64_t>& p = pos[t];
    const int64_t s = len[t];
    p.resize(static_cast<size_t>(s));
    switch (kind) {
      case PositionKind::kContiguous:
        for (int64_t i = 0; i < s; ++i) p[i] = n - s + i;
        break;
      case PositionKind::kZigzag: {
        // Chunks of capacity c; this rank holds chunk 0 and chunk 3, each filled at its end.
        const int64_t c = (n + 1) / 2, first = (s + 1) / 2, second = s - first;
        for (int64_t i = 0; i < first; ++i) p[i] = c - first + i;
        for (int64_t i = 0; i < second; ++i) p[first + i] = 4 * c - second + i;
        break;
      }
      case PositionKind::kStriped: {
        // Every 4th token (q on rank 1, k on rank 2), then a fixed shuffle: non-monotone.
        const int64_t rank = t == 0 ? 1 : 2;
        for (int64_t i = 0; i < s; ++i) p[i] = 4 * (n - s + i) + rank;
        std::mt19937_64 gen(seed * 31 + t);
        std::shuffle(p.begin(), p.end(), gen);
        break;
      }
    }
  }
  return pos;
}

int64_t document_of(int64_t position) {
  static constexpr std::array<int64_t, 9> kLengths = {1, 23, 5, 120, 64, 1, 300, 9, 511};
  int64_t cycle = 0;
  for (int64_t l : kLengths) cycle += l;
  int64_t doc = (position / cycle) * static_cast<int64_t>(kLengths.size());
  int64_t rest = position % cycle;
  for (int64_t l : kLengths) {
    if (rest < l) break;
    rest -= l;
    ++doc;
  }
  return doc;
}

std::vector<MaskSlice> make_slices(MaskKind kind, int64_t n, uint64_t seed) {
  std::vector<MaskSlice> slices;
  const auto add = [&](int64_t qb, int64_t qe, int64_t kb, int64_t ke, SliceType type) {
    slices.push_back({qb, qe, kb, ke, type});
  };
  // The document ranges of document_of over [from, n).
  const auto documents = [&](int64_t from, auto&& each) {
    for (int64_t a = from; a < n;) {
      int64_t b = a + 1;
      while (b < n && document_of(b) == document_of(a)) ++b;
      each(a, b);
      a = b;
    }
  };
  switch (kind) {
    case MaskKind::kPrefixLmSlices: {
      const int64_t prefix = n / 3;
      add(0, n, 0, prefix, SliceType::kFull);
      add(prefix, n, prefix, n, SliceType::kCausal);
      break;
    }
    case MaskKind::kDocSlices:
      documents(0, [&](int64_t a, int64_t b) { add(a, b, a, b, SliceType::kCausal); });
      break;
    case MaskKind::kSharedPrefixSlices: {
      const int64_t prefix = n / 4;
      add(0, prefix, 0, prefix, SliceType::kCausal);
      documents(prefix, [&](int64_t a, int64_t b) {
        add(a, b, 0, prefix, SliceType::kFull);
        add(a, b, a, b, SliceType::kCausal);
      });
      break;
    }
    case MaskKind::kRandomSlices: {
      // Cells of a grid never overlap, whatever their types.
      std::mt19937_64 gen(seed * 7919 + 3);
      const auto cuts = [&] {
        std::uniform_int_distribution<int64_t> at(0, n);
        std::vector<int64_t> c = {0, n, at(gen), at(gen), at(gen), at(gen)};
        std::sort(c.begin(), c.end());
        return c;
      };
      const std::vector<int64_t> qc = cuts(), kc = cuts();
      std::uniform_int_distribution<int> type(0, 4);  // 4: no slice in this cell
      for (size_t a = 0; a + 1 < qc.size(); ++a) {
        for (size_t b = 0; b + 1 < kc.size(); ++b) {
          const int t = type(gen);
          if (t < 4) add(qc[a], qc[a + 1], kc[b], kc[b + 1], static_cast<SliceType>(t));
        }
      }
      break;
    }
    default:
      break;
  }
  return slices;
}

Problem make_problem(const CaseSpec& spec) {
  Problem p;
  p.dims = spec.dims;
  const Dims& d = p.dims;
  switch (spec.mask) {
    case MaskKind::kNone:
      break;
    case MaskKind::kCausal:
      p.params.causal = true;
      break;
    case MaskKind::kWindow:
      p.params.window_left = 37;
      p.params.window_right = 5;
      break;
    case MaskKind::kCausalWindow:
      p.params.causal = true;
      p.params.window_left = 100;
      break;
    case MaskKind::kDocs:
      break;
    case MaskKind::kDocsCausal:
      p.params.causal = true;
      break;
    case MaskKind::kPrefixLmSlices:
    case MaskKind::kDocSlices:
    case MaskKind::kSharedPrefixSlices:
    case MaskKind::kRandomSlices:
      break;  // the slices, below, once the positions are known
  }
  p.params.dropout_p = spec.dropout_p;
  // hi32(offset) != 0 so the key's second word is exercised too.
  p.rng = {spec.seed * 0x9E3779B97F4A7C15ull + 12345, (spec.seed << 32) | 7};
  auto [q_pos, k_pos] = make_positions(spec.positions, d.Sq, d.Sk, spec.seed);
  p.q_pos = std::move(q_pos);
  p.k_pos = std::move(k_pos);
  if (spec.mask == MaskKind::kDocs || spec.mask == MaskKind::kDocsCausal) {
    for (int64_t x : p.q_pos) p.q_doc.push_back(document_of(x));
    for (int64_t x : p.k_pos) p.k_doc.push_back(document_of(x));
  }
  int64_t n = 0;
  for (const auto* pos : {&p.q_pos, &p.k_pos}) {
    for (int64_t x : *pos) n = std::max(n, x + 1);
  }
  p.params.slices = make_slices(spec.mask, n, spec.seed);
  p.params.slices.insert(p.params.slices.end(), spec.slices.begin(), spec.slices.end());
  std::mt19937_64 gen(spec.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.params.softcap = spec.softcap;
  if (spec.alibi) {
    for (int64_t h = 0; h < d.Hq; ++h) {
      p.params.alibi_slopes.push_back(
          std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(d.Hq)));
    }
  }
  if (spec.sink) {
    for (int64_t h = 0; h < d.Hq; ++h) p.params.sink.push_back(2.0f * normal(gen));
  }
  const auto fill = [&](std::vector<double>& x, int64_t count) {
    x.resize(static_cast<size_t>(count));
    for (double& e : x) e = static_cast<double>(normal(gen));
  };
  fill(p.q, d.B * d.Sq * d.Hq * d.Dqk);
  fill(p.k, d.B * d.Sk * d.Hkv * d.Dqk);
  fill(p.v, d.B * d.Sk * d.Hkv * d.Dv);
  fill(p.dout, d.B * d.Sq * d.Hq * d.Dv);
  round_inputs(p, spec.dtype);
  return p;
}

namespace {
double round_to(double x, DType dtype) {
  const float f = static_cast<float>(x);
  float r = f;
  store_from_float(dtype, &r, f);
  return static_cast<double>(dtype == DType::kF32 ? f : load_as_float(dtype, &r));
}
void round_all(std::vector<double>& x, DType dtype) {
  for (double& e : x) e = round_to(e, dtype);
}
}  // namespace

void round_inputs(Problem& problem, DType dtype) {
  if (dtype == DType::kF32) return;
  for (std::vector<double>* x : {&problem.q, &problem.k, &problem.v, &problem.dout}) {
    round_all(*x, dtype);
  }
}

namespace {

template <typename F>
void for_each_index(const std::array<int64_t, 4>& s, F&& f) {
  size_t flat = 0;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t x = 0; x < s[1]; ++x)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d) f(b, x, h, d, flat++);
}

}  // namespace

Tensor to_tensor(const std::vector<double>& x, const std::array<int64_t, 4>& shape,
                 MemoryLayout layout, MemoryCounter* counter, DType dtype) {
  Tensor t(storage_shape(shape, layout), dtype, counter);
  if (x.empty()) return t;  // zeros
  CPATTN_CHECK_EQ(static_cast<int64_t>(x.size()), t.numel(), ErrorCode::kShapeMismatch,
                  "to_tensor: values for shape " + shape_string(shape));
  const View view = t.view(layout);
  for_each_index(shape, [&](int64_t b, int64_t s, int64_t h, int64_t d, size_t flat) {
    write_element(view, b, s, h, d, static_cast<float>(x[flat]));
  });
  return t;
}

std::vector<double> to_doubles(ConstView view) {
  std::vector<double> x(static_cast<size_t>(view.numel()));
  for_each_index(view.shape, [&](int64_t b, int64_t s, int64_t h, int64_t d, size_t flat) {
    x[flat] = static_cast<double>(read_element(view, b, s, h, d));
  });
  return x;
}

std::vector<double> to_doubles(std::span<const float> x) { return {x.begin(), x.end()}; }

ProblemTensors::ProblemTensors(const Problem& p)
    : q(to_tensor(p.q, {p.dims.B, p.dims.Sq, p.dims.Hq, p.dims.Dqk})),
      k(to_tensor(p.k, {p.dims.B, p.dims.Sk, p.dims.Hkv, p.dims.Dqk})),
      v(to_tensor(p.v, {p.dims.B, p.dims.Sk, p.dims.Hkv, p.dims.Dv})),
      dout(to_tensor(p.dout, {p.dims.B, p.dims.Sq, p.dims.Hq, p.dims.Dv})) {}

Outputs run_kernel(const Problem& p, const KernelRun& run) {
  const Dims& d = p.dims;
  const std::array<int64_t, 4> q_shape = {d.B, d.Sq, d.Hq, d.Dqk},
                               k_shape = {d.B, d.Sk, d.Hkv, d.Dqk},
                               v_shape = {d.B, d.Sk, d.Hkv, d.Dv},
                               o_shape = {d.B, d.Sq, d.Hq, d.Dv};
  const Tensor q = to_tensor(p.q, q_shape, run.layout, nullptr, run.dtype),
               k = to_tensor(p.k, k_shape, run.layout, nullptr, run.dtype),
               v = to_tensor(p.v, v_shape, run.layout, nullptr, run.dtype);
  AttentionInputs in{q.view(run.layout),
                     k.view(run.layout),
                     v.view(run.layout),
                     p.q_pos,
                     p.k_pos,
                     p.q_doc,
                     p.k_doc};
  Tensor out(storage_shape(o_shape, run.layout), run.dtype);
  std::vector<float> lse(static_cast<size_t>(d.B * d.Hq * d.Sq));
  KernelOptions options;
  options.num_threads = run.num_threads;
  options.isa = run.isa;
  attention_kernel_forward(in, p.params, p.rng, out.view(run.layout), lse, options);
  Outputs result;
  result.out = to_doubles(out.view(run.layout));
  result.lse.assign(lse.begin(), lse.end());
  if (!run.backward) return result;

  const Tensor dout = to_tensor(p.dout, o_shape, run.layout, nullptr, run.dtype);
  Tensor dq(storage_shape(q_shape, run.layout), run.dtype),
      dk(storage_shape(k_shape, run.layout), run.dtype),
      dv(storage_shape(v_shape, run.layout), run.dtype);
  BackwardOptions backward_options;
  backward_options.kernel = options;
  std::vector<float> dsink(p.params.sink.size());
  backward_options.dsink = dsink;
  attention_kernel_backward(in, p.params, p.rng, dout.view(run.layout),
                            std::as_const(out).view(run.layout), lse, dq.view(run.layout),
                            dk.view(run.layout), dv.view(run.layout), backward_options);
  result.dq = to_doubles(dq.view(run.layout));
  result.dk = to_doubles(dk.view(run.layout));
  result.dv = to_doubles(dv.view(run.layout));
  result.dsink = to_doubles(dsink);
  return result;
}

Problem make_varlen_problem(CaseSpec spec, std::span<const int64_t> cu_seqlens_q,
                            std::span<const int64_t> cu_seqlens_k) {
  CPATTN_CHECK(spec.dims.B == 1, ErrorCode::kInvalidArgument,
               "make_varlen_problem: a varlen call has B = 1 (thd tensors), got B = ", spec.dims.B);
  CPATTN_CHECK(!cu_seqlens_q.empty() && !cu_seqlens_k.empty(), ErrorCode::kInvalidArgument,
               "make_varlen_problem: cu_seqlens must not be empty");
  spec.dims.Sq = cu_seqlens_q.back();
  spec.dims.Sk = cu_seqlens_k.back();
  spec.positions = PositionKind::kContiguous;
  if (spec.mask == MaskKind::kDocs) spec.mask = MaskKind::kNone;
  if (spec.mask == MaskKind::kDocsCausal) spec.mask = MaskKind::kCausal;
  Problem p = make_problem(spec);
  VarlenTokens t = varlen_tokens(cu_seqlens_q, cu_seqlens_k, spec.dims.Sq, spec.dims.Sk);
  p.q_pos = std::move(t.q_pos);
  p.k_pos = std::move(t.k_pos);
  p.q_doc = std::move(t.q_doc);
  p.k_doc = std::move(t.k_doc);
  return p;
}

namespace {

// Rows [begin, end) of a flat [1, S, H, D] tensor of `row` elements per token.
std::vector<double> token_rows(const std::vector<double>& x, int64_t begin, int64_t end,
                               int64_t row) {
  if (x.empty()) return {};
  return {x.begin() + begin * row, x.begin() + end * row};
}

void put_rows(const std::vector<double>& rows, int64_t begin, int64_t row,
              std::vector<double>& whole) {
  std::copy(rows.begin(), rows.end(), whole.begin() + begin * row);
}

}  // namespace

Outputs run_kernel_per_document(const Problem& p, std::span<const int64_t> cu_seqlens_q,
                                std::span<const int64_t> cu_seqlens_k, const KernelRun& run) {
  const Dims& d = p.dims;
  // Validates the whole problem's cumulative lengths once (and their totals).
  varlen_tokens(cu_seqlens_q, cu_seqlens_k, d.Sq, d.Sk);
  CPATTN_CHECK(d.B == 1, ErrorCode::kInvalidArgument,
               "run_kernel_per_document: a varlen problem has B = 1, got ", d.B);
  const int64_t q_row = d.Hq * d.Dqk, k_row = d.Hkv * d.Dqk, v_row = d.Hkv * d.Dv,
                o_row = d.Hq * d.Dv;
  Outputs all;
  all.out.assign(static_cast<size_t>(d.Sq * o_row), 0.0);
  all.lse.assign(static_cast<size_t>(d.Hq * d.Sq), -std::numeric_limits<double>::infinity());
  if (run.backward) {
    all.dq.assign(static_cast<size_t>(d.Sq * q_row), 0.0);
    all.dk.assign(static_cast<size_t>(d.Sk * k_row), 0.0);
    all.dv.assign(static_cast<size_t>(d.Sk * v_row), 0.0);
  }
  for (size_t doc = 0; doc + 1 < cu_seqlens_q.size(); ++doc) {
    const int64_t q0 = cu_seqlens_q[doc], q1 = cu_seqlens_q[doc + 1];
    const int64_t k0 = cu_seqlens_k[doc], k1 = cu_seqlens_k[doc + 1];
    if (q1 == q0) continue;  // no query: nothing to compute, its keys get no gradient
    Problem one;
    one.dims = d;
    one.dims.Sq = q1 - q0;
    one.dims.Sk = k1 - k0;
    one.params = p.params;
    one.rng = p.rng;
    const std::array<int64_t, 2> cu_q{0, one.dims.Sq}, cu_k{0, one.dims.Sk};
    VarlenTokens t = varlen_tokens(cu_q, cu_k, one.dims.Sq, one.dims.Sk);
    one.q_pos = std::move(t.q_pos);
    one.k_pos = std::move(t.k_pos);
    one.q = token_rows(p.q, q0, q1, q_row);
    one.k = token_rows(p.k, k0, k1, k_row);
    one.v = token_rows(p.v, k0, k1, v_row);
    one.dout = token_rows(p.dout, q0, q1, o_row);
    const Outputs r = run_kernel(one, run);
    put_rows(r.out, q0, o_row, all.out);
    for (int64_t h = 0; h < d.Hq; ++h) {
      for (int64_t i = 0; i < one.dims.Sq; ++i) {
        all.lse[static_cast<size_t>(h * d.Sq + q0 + i)] =
            r.lse[static_cast<size_t>(h * one.dims.Sq + i)];
      }
    }
    if (!run.backward) continue;
    put_rows(r.dq, q0, q_row, all.dq);
    put_rows(r.dk, k0, k_row, all.dk);
    put_rows(r.dv, k0, v_row, all.dv);
    // dsink is a sum over the rows: the documents' sums add up.
    if (!r.dsink.empty()) {
      all.dsink.resize(r.dsink.size(), 0.0);
      for (size_t h = 0; h < r.dsink.size(); ++h) all.dsink[h] += r.dsink[h];
    }
  }
  return all;
}

double max_abs_error(const std::vector<double>& a, const std::vector<double>& b) {
  CPATTN_CHECK_EQ(b.size(), a.size(), ErrorCode::kShapeMismatch, "max_abs_error: lengths");
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;  // also equal infinities
    const double e = std::fabs(a[i] - b[i]);
    worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
  }
  return worst;
}

bool ErrorRow::pass() const {
  for (size_t t = 0; t < err.size(); ++t) {
    if (!(err[t] <= tol[t])) return false;
  }
  return true;
}

Oracle make_oracle(const Problem& problem, bool with_backward, DType dtype) {
  Oracle o;
  o.exact = attention(problem, with_backward, &o.magnitude);
  o.fp32 = attention_fp32(problem, with_backward);
  o.dtype = dtype;
  if (dtype != DType::kF32) {
    for (std::vector<double>* x : {&o.fp32.out, &o.fp32.dq, &o.fp32.dk, &o.fp32.dv}) {
      round_all(*x, dtype);
    }
  }
  return o;
}

namespace {
std::array<const std::vector<double>*, kTensorNames.size()> tensors(const Outputs& o) {
  return {&o.out, &o.lse, &o.dq, &o.dk, &o.dv, &o.dsink};
}
double max_of(const std::vector<double>& x) {
  double m = 0.0;
  for (double e : x) m = std::max(m, e);
  return m;
}
}  // namespace

ErrorRow compare(std::string name, const Oracle& oracle, const Outputs& got) {
  ErrorRow row;
  row.name = std::move(name);
  const auto exact = tensors(oracle.exact), fp32 = tensors(oracle.fp32),
             magnitude = tensors(oracle.magnitude), result = tensors(got);
  double lse_max = 0.0;  // over the finite entries (an empty row's lse is -inf)
  for (double lse : oracle.exact.lse) {
    if (std::isfinite(lse)) lse_max = std::max(lse_max, std::fabs(lse));
  }
  for (size_t t = 0; t < kTensorNames.size(); ++t) {
    if ((t >= 2 && got.dq.empty()) || (exact[t]->empty() && result[t]->empty())) {
      // forward only, or no sinks (dsink empty on both sides; one missing on one side throws in
      // max_abs_error)
      row.err[t] = 0.0;
      row.tol[t] = kTolAbs;
      continue;
    }
    row.err[t] = max_abs_error(*exact[t], *result[t]);
    row.tol[t] = kTolFactor * max_abs_error(*exact[t], *fp32[t]) + kTolAbs;
    const double mag = max_of(*magnitude[t]);
    row.tol[t] += kTolUlps * kEpsFp32 * mag;
    if (t >= 2) row.tol[t] += kTolLseUlps * kEpsFp32 * lse_max * mag;  // the gradients
    if (t != 1 && oracle.dtype != DType::kF32) {  // the 16-bit terms (reference_case.h)
      const double ulps16 = kTolUlps16 + (oracle.dtype == DType::kBF16 ? kTolProducts16 : 0.0);
      row.tol[t] += ulps16 * unit_roundoff(oracle.dtype) * mag;
    }
  }
  return row;
}

ErrorRow check_kernel_case(const CaseSpec& spec, int num_threads, Isa isa) {
  const Problem problem = make_problem(spec);
  const Oracle oracle = make_oracle(problem, true, spec.dtype);
  const Outputs got = run_kernel(problem, {spec.layout, num_threads, true, isa, spec.dtype});
  return compare(case_name(spec), oracle, got);
}

}  // namespace cpattn::reference
