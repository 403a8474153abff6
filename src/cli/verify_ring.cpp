// The ring part of `cpattn verify` (verify_ring.h): build a case's problem, run it on the ring
// (verify/ring_case.h gathers the whole-sequence result) and on the single-rank kernel, and judge
// both.
#include "cli/verify_ring.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <utility>

#include "cpattn/dtype.h"
#include "cpattn/error.h"
#include "cpattn/stopwatch.h"
#include "verify/reference_case.h"
#include "verify/ring_case.h"

namespace cpattn::cli {

std::string ring_case_name(const RingCase& c) {
  const RingShape& s = c.shape;
  const reference::Dims& d = s.dims;
  const bool window = s.window_left >= 0 || s.window_right >= 0;
  std::string mask = s.varlen.empty() ? "" : "Varlen" + std::to_string(s.varlen.size()) + "_";
  if (s.docs) mask += "Docs";
  if (s.causal) mask += "Causal";
  if (window) mask += "Window";
  if (!s.docs && !s.causal && !window) mask += "Full";
  const std::string heads = d.Hq == d.Hkv
                                ? "MHA" + std::to_string(d.Hq)
                                : "GQA" + std::to_string(d.Hq) + "x" + std::to_string(d.Hkv);
  char p[32];
  std::snprintf(p, sizeof(p), "%g", static_cast<double>(s.dropout_p));
  std::string drop = p;
  for (char& ch : drop) ch = ch == '.' ? 'p' : ch;
  std::string name = mask + "_" + heads + "_S" + std::to_string(d.Sq) + "_D" +
                     std::to_string(d.Dqk) + "x" + std::to_string(d.Dv) + "_p" + drop;
  if (window) {
    // -1 (unbounded) reads as "inf" so the name stays within letters, digits and '_'.
    const auto side = [](int64_t w) { return w < 0 ? std::string("inf") : std::to_string(w); };
    name += "_W" + side(s.window_left) + "x" + side(s.window_right);
  }
  if (d.B != 1) name += "_B" + std::to_string(d.B);
  if (s.dtype != DType::kF32) name += std::string("_") + dtype_name(s.dtype);
  const CaseFeatures& f = s.features;
  if (f.sink) name += "_sink";
  if (f.softcap > 0.0f) {
    std::snprintf(p, sizeof(p), "%g", static_cast<double>(f.softcap));
    std::string cap = p;
    for (char& ch : cap) ch = ch == '.' ? 'p' : ch == '+' ? 'x' : ch == '-' ? 'm' : ch;
    name += "_cap" + cap;
  }
  if (f.alibi) name += "_alibi";
  if (!f.slices.empty()) name += "_slices" + std::to_string(f.slices.size());
  name += std::string("_") + layout_name(c.layout) + "_cp" + std::to_string(c.cp_size);
  if (c.strategy != Strategy::ring()) {
    std::string strategy = strategy_name(c.strategy);
    for (char& ch : strategy) ch = ch == ':' ? '_' : ch;
    name += "_" + strategy;
  }
  return name;
}

namespace {

// The cumulative lengths (cu_seqlens) of a varlen shape's documents.
std::vector<int64_t> cumulative(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu{0};
  for (const int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

}  // namespace

reference::Problem make_ring_problem(const RingShape& shape) {
  reference::CaseSpec spec;
  spec.mask = shape.docs ? reference::MaskKind::kDocs : reference::MaskKind::kNone;
  spec.dims = shape.dims;
  spec.dims.Sk = spec.dims.Sq;
  spec.dropout_p = shape.dropout_p;
  spec.seed = shape.seed;
  spec.dtype = shape.dtype;
  add_features(shape.features, spec);
  const std::vector<int64_t> cu = cumulative(shape.varlen);
  reference::Problem p = shape.varlen.empty() ? reference::make_problem(spec)
                                              : reference::make_varlen_problem(spec, cu, cu);
  p.params.causal = shape.causal;
  p.params.window_left = shape.window_left;
  p.params.window_right = shape.window_right;
  return p;
}

std::vector<RingCase> default_ring_cases(int cp_size, const std::vector<Layout>& layouts,
                                         const Strategy& strategy) {
  std::vector<RingCase> cases;
  uint64_t seed = 201;
  for (const bool causal : {false, true}) {
    for (const float dropout : {0.0f, 0.1f}) {
      RingShape shape;
      shape.causal = causal;
      shape.dropout_p = dropout;
      shape.seed = seed++;
      for (const Layout layout : layouts) cases.push_back({shape, layout, cp_size, strategy});
    }
  }
  return cases;
}

std::vector<Strategy> sweep_strategies(int cp_size, int64_t Hq, int64_t Hkv, DType dtype) {
  std::vector<Strategy> candidates = {Strategy::ring(), Strategy::allgather(), Strategy::ulysses()};
  for (int u = 2; u < cp_size; ++u) {
    if (cp_size % u == 0) candidates.push_back(Strategy::hybrid(u, cp_size / u));
  }
  std::vector<Strategy> out;
  for (const Strategy& s : candidates) {
    try {
      check_strategy(s, cp_size, Hq, Hkv);
      check_strategy_dtype(s, dtype);
      out.push_back(s);
    } catch (const Error&) {
      // not for these heads on this group (e.g. ulysses with Hq % P != 0)
    }
  }
  return out;
}

std::vector<VerifyResult> verify_ring_case(const RingCase& c, Communicator* world,
                                           int kernel_threads, std::chrono::milliseconds timeout) {
  CPATTN_CHECK(c.cp_size >= 1, ErrorCode::kInvalidArgument, "--cp: expected >= 1, got ", c.cp_size);
  if (world != nullptr) {
    CPATTN_CHECK_EQ(c.cp_size, world->size(), ErrorCode::kInvalidArgument,
                    "--cp with --backend mpi (one rank per MPI process)");
  }
  const Stopwatch watch;
  const reference::Problem p = make_ring_problem(c.shape);
  reference::RingRun run;
  run.cp_size = c.cp_size;
  run.layout = c.layout;
  run.num_threads = world != nullptr ? kernel_threads : 1;  // in-process ranks are the threads
  run.strategy = c.strategy;
  run.dtype = c.shape.dtype;
  if (!c.shape.varlen.empty()) {
    run.cu_seqlens_q = cumulative(c.shape.varlen);
    run.cu_seqlens_k = run.cu_seqlens_q;
  }
  const reference::RankWrapper with_deadline =
      [timeout](Communicator& comm, const std::function<void(Communicator&)>& body) {
        comm.set_timeout(timeout);
        body(comm);
      };
  const reference::Outputs ring = world != nullptr ? reference::run_ring_gathered(*world, p, run)
                                                   : reference::run_ring(p, run, with_deadline);
  const double ring_seconds = watch.seconds();
  if (world != nullptr && world->rank() != 0) return {};

  const std::string name = ring_case_name(c);
  reference::Oracle oracle = reference::make_oracle(p, true, c.shape.dtype);
  // A CP run without dsink leaves it unjudged (the report shows "-"), rather than failing the
  // comparison of the tensors it does return.
  const bool sink = !p.params.sink.empty(), dsink = sink && !ring.dsink.empty();
  if (!dsink) {
    for (reference::Outputs* o : {&oracle.exact, &oracle.magnitude, &oracle.fp32}) o->dsink = {};
  }
  reference::ErrorRow vs_exact = reference::compare(name, oracle, ring);
  const reference::Outputs kernel = reference::run_kernel(
      p, {MemoryLayout::kBSHD, kernel_threads, true, Isa::kAuto, c.shape.dtype});
  // A 16-bit ring result and another kernel run's are each one rounding of fp32 values that
  // differ in their last bits (other block order; on avx512bf16 P is rounded at other running
  // maxima), so an element may round to neighbouring 16-bit values: one ulp, 2u of the largest
  // magnitude. lse and dsink (indices 1 and 5) are fp32.
  const auto versus = [&](const char* what, const reference::Outputs& other) {
    reference::ErrorRow row;
    row.name = name + what;
    const std::array<const std::vector<double>*, 6> a = {&ring.out, &ring.lse, &ring.dq,
                                                         &ring.dk,  &ring.dv,  &ring.dsink};
    const std::array<const std::vector<double>*, 6> b = {&other.out, &other.lse, &other.dq,
                                                         &other.dk,  &other.dv,  &other.dsink};
    for (size_t t = 0; t < a.size(); ++t) {
      if (t == 5 && !dsink) continue;  // dsink unjudged: err 0, as in vs_exact
      row.err[t] = reference::max_abs_error(*b[t], *a[t]);
    }
    row.tol = vs_exact.tol;
    const double u = unit_roundoff(c.shape.dtype);
    for (size_t t = 0; t < a.size() && c.shape.dtype != DType::kF32; ++t) {
      if (t == 1 || t == 5) continue;
      double largest = 0.0;
      for (double x : *b[t]) largest = std::max(largest, std::abs(x));
      row.tol[t] += 2.0 * u * largest;
    }
    return row;
  };
  std::vector<VerifyResult> rows;
  rows.push_back({versus("_vs_kernel", kernel), 0.0, sink, dsink});
  // Each document alone has its own positions, so its dropout masks differ from the packed
  // call's, and mask slices (on global positions) would mean other pairs: without both only.
  if (!c.shape.varlen.empty() && c.shape.dropout_p == 0.0f && p.params.slices.empty()) {
    const std::vector<int64_t> cu = cumulative(c.shape.varlen);
    const reference::Outputs alone = reference::run_kernel_per_document(
        p, cu, cu, {MemoryLayout::kBSHD, kernel_threads, true, Isa::kAuto, c.shape.dtype});
    rows.push_back({versus("_vs_documents", alone), 0.0, sink, dsink});
  }
  rows.front().seconds = watch.seconds() - ring_seconds;
  rows.insert(rows.begin(), {std::move(vs_exact), ring_seconds, sink, dsink});
  return rows;
}

}  // namespace cpattn::cli
