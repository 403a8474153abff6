// Benchmarks of the single-rank flash-attention kernel (docs/performance.md, "Kernel"): GFLOPS of
// forward/backward on every ISA path against the FMA throughput peak of each ISA and OpenBLAS
// sgemm, both measured in the same run, a naive materialising attention, causal vs full wall
// time, and the peak extra memory of a long forward. The machine (CPU flags, ISA paths, OpenBLAS
// core) is printed first, a summary of the target ratios after the Google Benchmark table.
// Quick subset: --benchmark_filter='FmaPeak|Sgemm|/D:128/S:4096/causal:0/|Naive/D:128|PeakMemory'
// bf16 / fp16 vs fp32 forward: --benchmark_filter='Forward/Hkv:8/D:128/S:4096/causal:0/isa:0/'
// bf16 vs fp32 peak memory of a forward + backward: --benchmark_filter=TrainingPeakMemory
// A causal sliding window, on and off the tile grid: --benchmark_filter=Window
// The best OpenBLAS sgemm of this CPU: run with OPENBLAS_CORETYPE unset
// (env -u OPENBLAS_CORETYPE bench_kernel ...); the first line says which core OpenBLAS ran.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "cpattn/memory.h"
#include "machine.h"

namespace {

using cpattn::available_isas;
using cpattn::detected_isa;
using cpattn::fastest_isa;
using cpattn::Isa;
using cpattn::isa_name;
using cpattn::Tensor;
constexpr int kThreads = 2;
constexpr int64_t kHeadsQ = 8;

namespace bench = cpattn::bench;
using bench::median_of;

constexpr int64_t kSgemmN = 2048;
double sgemm_gflops() { return 2.0 * std::pow(double(kSgemmN), 3) / median_of("sgemm") / 1e9; }

// The ISA argument of the attention cases: the Isa's value, 0 = Isa::kAuto (what a caller gets),
// else the path's row of the ISA table (1 = its first row).
int64_t arg_of(Isa isa) { return static_cast<int64_t>(isa); }
Isa isa_arg(int64_t a) { return static_cast<Isa>(a); }

// The widest fp32 FMA path of this CPU (avx512bf16's fp32 FMAs are avx512's).
Isa fp32_peak_isa() { return detected_isa() == Isa::kAvx512Bf16 ? Isa::kAvx512 : detected_isa(); }

// The fp32 FMA peak of the widest ISA this CPU runs (GFLOPS, kThreads threads), from this run:
// every vs_peak figure, bf16 ones included, is against it.
double peak_gflops() { return median_of(std::string("fma_peak/") + isa_name(fp32_peak_isa())); }

// Times the benchmark loop by wall clock, records it under key, and sets GFLOPS / vs_sgemm.
template <typename Fn>
void timed_loop(benchmark::State& state, const std::string& key, double flops, Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) fn();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      double(state.iterations());
  bench::record(key, secs);
  state.counters["GFLOPS"] = flops / secs / 1e9;
  if (bench::samples().count("sgemm"))
    state.counters["vs_sgemm"] = flops / secs / 1e9 / sgemm_gflops();
  if (!std::isnan(peak_gflops())) state.counters["vs_peak"] = flops / secs / 1e9 / peak_gflops();
}

// The dtype argument of the forward cases: 0 fp32, 1 bf16, 2 fp16 (q, k, v and out).
constexpr cpattn::DType kDtypeArgs[] = {cpattn::DType::kF32, cpattn::DType::kBF16,
                                        cpattn::DType::kF16};

// N(0, 1) values, rounded to the tensor's dtype.
void fill_random(Tensor& t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  if (t.dtype() == cpattn::DType::kF32) {
    for (float& x : t.span()) x = nd(gen);
    return;
  }
  std::byte* p = t.bytes().data();
  for (int64_t i = 0; i < t.numel(); ++i) cpattn::store_from_float(t.dtype(), p + 2 * i, nd(gen));
}

// BSHD operands of one B = 1 attention call with contiguous positions (q, k, v, out in dtype).
struct Problem {
  Problem(int64_t s, int64_t hkv, int64_t d, cpattn::DType dtype = cpattn::DType::kF32)
      : q({1, s, kHeadsQ, d}, dtype),
        k({1, s, hkv, d}, dtype),
        v({1, s, hkv, d}, dtype),
        out({1, s, kHeadsQ, d}, dtype),
        lse({1, kHeadsQ, s}),
        pos(static_cast<size_t>(s)) {
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    for (int64_t i = 0; i < s; ++i) pos[static_cast<size_t>(i)] = i;
  }
  cpattn::AttentionInputs inputs() const {
    return {q.view(), k.view(), v.view(), pos, pos, {}, {}};
  }
  Tensor q, k, v, out, lse;
  std::vector<int64_t> pos;
};

double attention_flops(int64_t s, int64_t d, bool causal) {
  return 2.0 * kHeadsQ * double(s) * double(s) * 2.0 * double(d) * (causal ? 0.5 : 1.0);
}

std::string case_key(const char* what, int64_t hkv, int64_t d, int64_t s, bool causal,
                     Isa isa = Isa::kAuto) {
  return std::string(what) + "/Hkv" + std::to_string(hkv) + "/D" + std::to_string(d) + "/S" +
         std::to_string(s) + (causal ? "/causal" : "/full") + "/" + isa_name(isa);
}

// FMA (generic: multiply + add) throughput of one ISA on kThreads threads: the best of 5 runs
// of the loop (a peak: background load can only lower a run, and one short run under load made
// kernel / peak ratios above 1).
void BM_FmaPeak(benchmark::State& state) {
  const Isa isa = isa_arg(state.range(0));
  for (auto _ : state) {
    double gflops = 0;
    for (int run = 0; run < 5; ++run) {
      gflops = std::max(gflops, bench::fma_peak_gflops(isa, kThreads));
    }
    bench::record(std::string("fma_peak/") + isa_name(isa), gflops);
    state.counters["GFLOPS"] = gflops;
  }
  state.SetLabel(isa_name(isa));
}

void BM_Sgemm(benchmark::State& state) {
  openblas_set_num_threads(kThreads);
  const size_t n = kSgemmN;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  timed_loop(state, "sgemm", 2.0 * std::pow(double(n), 3), [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a.data(),
                int(n), b.data(), int(n), 0.0f, c.data(), int(n));
    benchmark::DoNotOptimize(c.data());
  });
}

void BM_Forward(benchmark::State& state) {
  const int64_t hkv = state.range(0), d = state.range(1), s = state.range(2);
  const bool causal = state.range(3) != 0;
  const Isa isa = isa_arg(state.range(4));
  const cpattn::DType dtype = kDtypeArgs[static_cast<size_t>(state.range(5))];
  Problem p(s, hkv, d, dtype);
  cpattn::AttentionParams params;
  params.causal = causal;
  cpattn::KernelOptions opt{kThreads};
  opt.isa = isa;
  std::string key = case_key("fwd", hkv, d, s, causal, isa);
  if (dtype != cpattn::DType::kF32) key += std::string("/") + cpattn::dtype_name(dtype);
  timed_loop(state, key, attention_flops(s, d, causal), [&] {
    cpattn::attention_kernel_forward(p.inputs(), params, {}, p.out.view(), p.lse.span(), opt);
  });
}

void BM_Backward(benchmark::State& state) {
  const int64_t hkv = state.range(0), d = state.range(1), s = state.range(2);
  const bool causal = state.range(3) != 0;
  const Isa isa = isa_arg(state.range(4));
  const cpattn::DType dtype = kDtypeArgs[static_cast<size_t>(state.range(5))];
  Problem p(s, hkv, d, dtype);
  cpattn::AttentionParams params;
  params.causal = causal;
  cpattn::attention_kernel_forward(p.inputs(), params, {}, p.out.view(), p.lse.span(), {kThreads});
  Tensor dout({1, s, kHeadsQ, d}, dtype), dq({1, s, kHeadsQ, d}, dtype), dk({1, s, hkv, d}, dtype),
      dv({1, s, hkv, d}, dtype);
  fill_random(dout, 4);
  cpattn::BackwardOptions opt;
  opt.kernel.num_threads = kThreads;
  opt.kernel.isa = isa;
  const double flops = 2.5 * attention_flops(s, d, causal);
  std::string key = case_key("bwd", hkv, d, s, causal, isa);
  if (dtype != cpattn::DType::kF32) key += std::string("/") + cpattn::dtype_name(dtype);
  timed_loop(state, key, flops, [&] {
    cpattn::attention_kernel_backward(p.inputs(), params, {}, dout.view(), p.out.view(),
                                      p.lse.span(), dq.view(), dk.view(), dv.view(), opt);
  });
}

// A causal 512-token sliding window at S = 16384, Hq = Hkv = 8, D = 128, fp32: forward (pass 0) or
// backward (pass 1), with the queries at positions [q_from, S) against every key. q_from 1000
// puts the tiles' diagonals off the 64-row grid, where the partially visible tiles' boxes
// (ScoreBox) leave the most out. GFLOPS count the visible pairs only.
void BM_Window(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const int64_t s = 16384, d = 128, window = 512, q_from = state.range(1), sq = s - q_from;
  Problem p(s, kHeadsQ, d);
  Tensor q({1, sq, kHeadsQ, d}), out({1, sq, kHeadsQ, d}), lse({1, kHeadsQ, sq});
  fill_random(q, 5);
  const std::vector<int64_t> q_pos(p.pos.begin() + q_from, p.pos.end());
  const cpattn::AttentionInputs in{q.view(), p.k.view(), p.v.view(), q_pos, p.pos, {}, {}};
  cpattn::AttentionParams params;
  params.causal = true;
  params.window_left = window;
  double pairs = 0;
  for (const int64_t qp : q_pos) pairs += double(std::min(qp, window) + 1);
  const double flops = 4.0 * double(d) * double(kHeadsQ) * pairs * (backward ? 2.5 : 1.0);
  const std::string key =
      std::string(backward ? "bwd" : "fwd") + "/window512/q_from" + std::to_string(q_from);
  cpattn::attention_kernel_forward(in, params, {}, out.view(), lse.span(), {kThreads});
  if (!backward) {
    timed_loop(state, key, flops, [&] {
      cpattn::attention_kernel_forward(in, params, {}, out.view(), lse.span(), {kThreads});
    });
    return;
  }
  Tensor dout({1, sq, kHeadsQ, d}), dq({1, sq, kHeadsQ, d}), dk({1, s, kHeadsQ, d}),
      dv({1, s, kHeadsQ, d});
  fill_random(dout, 4);
  cpattn::BackwardOptions opt;
  opt.kernel.num_threads = kThreads;
  timed_loop(state, key, flops, [&] {
    cpattn::attention_kernel_backward(in, params, {}, dout.view(), out.view(), lse.span(),
                                      dq.view(), dk.view(), dv.view(), opt);
  });
}

// The baseline a flash kernel must beat: per head, S = scale * Q K^T (sgemm, S x S materialised),
// row softmax, O = P V (sgemm).
void BM_NaiveForward(benchmark::State& state) {
  openblas_set_num_threads(kThreads);
  const int64_t d = state.range(0), s = state.range(1);
  Problem p(s, kHeadsQ, d);
  std::vector<float> scores(static_cast<size_t>(s * s));
  const int ld = int(kHeadsQ * d), n = int(s);
  const float scale = 1.0f / std::sqrt(float(d));
  timed_loop(
      state, "naive/D" + std::to_string(d) + "/S" + std::to_string(s), attention_flops(s, d, false),
      [&] {
        for (int64_t h = 0; h < kHeadsQ; ++h) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(d), scale,
                      p.q.data() + h * d, ld, p.k.data() + h * d, ld, 0.0f, scores.data(), n);
          for (int64_t i = 0; i < s; ++i) {
            float* row = scores.data() + i * s;
            const float mx = *std::max_element(row, row + s);
            float sum = 0.0f;
            for (int64_t j = 0; j < s; ++j) sum += row[j] = std::exp(row[j] - mx);
            for (int64_t j = 0; j < s; ++j) row[j] /= sum;
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, int(d), n, 1.0f, scores.data(),
                      n, p.v.data() + h * d, ld, 0.0f, p.out.data() + h * d, ld);
        }
        benchmark::DoNotOptimize(p.out.data());
      });
}

int64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size()));
  }
  return -1;
}

// Peak memory of a forward at S = 65536, D = 64, Hq = Hkv = 8 beyond its inputs and outputs.
// Counted: the process MemoryCounter's peak over live bytes before the call (all kernel scratch is
// counted Tensors). Uncounted: VmHWM after the call minus VmRSS before it, with the high-water
// mark reset through /proc/self/clear_refs. A causal 512-token sliding window keeps the run short
// (tile skipping); scratch does not depend on the mask.
void BM_ForwardPeakMemory(benchmark::State& state) {
  const int64_t s = 65536, d = 64;
  Problem p(s, kHeadsQ, d);
  cpattn::AttentionParams params;
  params.causal = true;
  params.window_left = 512;
  for (auto _ : state) {
    std::ofstream("/proc/self/clear_refs") << "5";
    const int64_t rss_before = status_kib("VmRSS:");
    const int64_t live_before = cpattn::process_memory().stats().live_bytes;
    cpattn::process_memory().reset_peak();
    cpattn::attention_kernel_forward(p.inputs(), params, {}, p.out.view(), p.lse.span(),
                                     {kThreads});
    const double counted =
        double(cpattn::process_memory().stats().peak_bytes - live_before) / (1 << 20);
    const double rss = double(status_kib("VmHWM:") - rss_before) / 1024.0;
    state.counters["counted_extra_MiB"] = counted;
    state.counters["rss_extra_MiB"] = rss;
    bench::record("peak_memory/counted_MiB", counted);
    bench::record("peak_memory/rss_MiB", rss);
  }
}

// Every size/dim/grouping/mask in fp32 (dtype 0) on the path kAuto resolves to (isa 0), the
// S = 4096, D = 128 full cases once more on each ISA path the CPU runs (isa 1 generic, 2 avx2,
// 3 avx512, 4 avx512bf16), and the Hkv = 8 one in bf16 and fp16 (dtype 1, 2) on the kAuto path
// (docs/performance.md, "bf16 and fp16").
void kernel_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"Hkv", "D", "S", "causal", "isa", "dtype"});
  for (int64_t s : {1024, 4096, 16384})
    for (int64_t d : {64, 128})
      for (int64_t hkv : {8, 2})
        for (int64_t causal : {0, 1}) b->Args({hkv, d, s, causal, 0, 0});
  for (Isa isa : available_isas()) {
    for (int64_t hkv : {8, 2}) b->Args({hkv, 128, 4096, 0, arg_of(isa), 0});
  }
  for (int64_t dtype : {1, 2}) b->Args({8, 128, 4096, 0, 0, dtype});
  // bf16 on both AVX-512 paths (widened fp32 products, vdpbf16ps), beside the one kAuto picks.
  if (detected_isa() == Isa::kAvx512Bf16) {
    for (Isa isa : {Isa::kAvx512, Isa::kAvx512Bf16}) b->Args({8, 128, 4096, 0, arg_of(isa), 1});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

void isa_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"isa"});
  for (Isa isa : available_isas()) {
    b->Arg(arg_of(isa));
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(1);
}

BENCHMARK(BM_FmaPeak)->Apply(isa_args);
BENCHMARK(BM_Sgemm)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Forward)->Apply(kernel_args);
BENCHMARK(BM_Backward)->Apply(kernel_args);
BENCHMARK(BM_Window)
    ->ArgNames({"pass", "q_from"})
    ->ArgsProduct({{0, 1}, {0, 1000}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NaiveForward)
    ->ArgNames({"D", "S"})
    ->Args({64, 4096})
    ->Args({128, 4096})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ForwardPeakMemory)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// Peak memory of a forward + backward at S = 65536, Hq = Hkv = 8, D = 128 in each dtype
// (arg: 0 fp32, 1 bf16): the counted bytes of q, k, v, dout, out, lse, dq, dk, dv (one
// MemoryCounter) and the kernel's scratch peak on top of them (process_memory()). Causal with a
// 512-token window, as above. The bf16 / fp32 ratio of the total is the figure of the dtype issue.
void BM_TrainingPeakMemory(benchmark::State& state) {
  const int64_t s = 65536, d = 128;
  const cpattn::DType dtype = state.range(0) == 0 ? cpattn::DType::kF32 : cpattn::DType::kBF16;
  const std::shared_ptr<cpattn::MemoryCounter> mem = cpattn::MemoryCounter::create();
  cpattn::AttentionParams params;
  params.causal = true;
  params.window_left = 512;
  for (auto _ : state) {
    const std::vector<int64_t> shape{1, s, kHeadsQ, d};
    Tensor q(shape, dtype, mem.get()), k(shape, dtype, mem.get()), v(shape, dtype, mem.get()),
        dout(shape, dtype, mem.get()), out(shape, dtype, mem.get()),
        lse({1, kHeadsQ, s}, mem.get()), dq(shape, dtype, mem.get()), dk(shape, dtype, mem.get()),
        dv(shape, dtype, mem.get());
    std::vector<int64_t> pos(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) pos[static_cast<size_t>(i)] = i;
    const double tensors = double(mem->stats().live_bytes) / (1 << 20);
    const int64_t scratch_before = cpattn::process_memory().stats().live_bytes;
    cpattn::process_memory().reset_peak();
    const cpattn::AttentionInputs in{q.view(), k.view(), v.view(), pos, pos, {}, {}};
    cpattn::attention_kernel_forward(in, params, {}, out.view(), lse.span(), {kThreads});
    cpattn::BackwardOptions backward;
    backward.kernel.num_threads = kThreads;
    cpattn::attention_kernel_backward(in, params, {}, dout.view(), out.view(), lse.span(),
                                      dq.view(), dk.view(), dv.view(), backward);
    const double scratch =
        double(cpattn::process_memory().stats().peak_bytes - scratch_before) / (1 << 20);
    const std::string name = cpattn::dtype_name(dtype);
    state.counters["tensors_MiB"] = tensors;
    state.counters["scratch_MiB"] = scratch;
    bench::record("training_memory/" + name, tensors + scratch);
    bench::record("training_memory/" + name + "/tensors", tensors);
  }
}
BENCHMARK(BM_TrainingPeakMemory)
    ->ArgName("dtype")
    ->DenseRange(0, 1)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// target: the target ("<= 0.55"), or nullptr for a figure without one.
void print_ratio(const char* what, double value, const char* target) {
  if (std::isnan(value)) return;
  if (target == nullptr) {
    std::printf("  %-52s %7.3f\n", what, value);
  } else {
    std::printf("  %-52s %7.3f   (target %s)\n", what, value, target);
  }
}

// The targets as ratios of medians measured in this run.
void print_summary() {
  std::printf("\nSummary (medians of this run, %d threads)\n", kThreads);
  std::printf("  %s\n  %s\n", bench::cpu_line().c_str(), bench::isa_line().c_str());
  const double peak = peak_gflops();
  for (Isa isa : available_isas()) {
    const double f = median_of(std::string("fma_peak/") + isa_name(isa));
    if (std::isnan(f)) continue;
    if (isa == Isa::kAvx512Bf16) {
      std::printf("  vdpbf16ps peak   %7.1f GFLOPS (bf16 products)\n", f);
    } else {
      std::printf("  FMA peak %-7s %7.1f GFLOPS\n", isa_name(isa), f);
    }
  }
  if (bench::samples().count("sgemm")) {
    std::printf("  sgemm 2048^3: %.1f GFLOPS (OpenBLAS core %s)\n", sgemm_gflops(),
                openblas_get_corename());
  }
  const bool avx512 = fp32_peak_isa() == Isa::kAvx512;
  std::printf(
      "  | path | Hkv | fwd GFLOPS | fwd / peak | fwd / sgemm | bwd GFLOPS | bwd / peak |"
      " bwd / sgemm |\n  |---|---|---|---|---|---|---|---|\n");
  for (Isa isa : available_isas()) {
    for (int64_t hkv : {8, 2}) {
      const double ff = attention_flops(4096, 128, false);
      const double fwd = ff / median_of(case_key("fwd", hkv, 128, 4096, false, isa)) / 1e9;
      const double bwd = 2.5 * ff / median_of(case_key("bwd", hkv, 128, 4096, false, isa)) / 1e9;
      if (std::isnan(fwd) && std::isnan(bwd)) continue;
      std::printf("  | %s | %lld | %.1f | %.3f | %.3f | %.1f | %.3f | %.3f |\n", isa_name(isa),
                  static_cast<long long>(hkv), fwd, fwd / peak, fwd / sgemm_gflops(), bwd,
                  bwd / peak, bwd / sgemm_gflops());
    }
  }
  const Isa best = fastest_isa();
  for (int64_t hkv : {8, 2}) {
    for (const char* dir : {"fwd", "bwd"}) {
      const double flops = (dir[0] == 'b' ? 2.5 : 1.0) * attention_flops(4096, 128, false);
      const double gflops = flops / median_of(case_key(dir, hkv, 128, 4096, false, best)) / 1e9;
      const std::string what = case_key(dir, hkv, 128, 4096, false, best);
      if (avx512) {
        print_ratio((what + " / FMA peak").c_str(), gflops / peak,
                    dir[0] == 'f' ? ">= 0.70" : ">= 0.60");
      } else {
        print_ratio((what + " / sgemm").c_str(), gflops / sgemm_gflops(), ">= 0.85");
      }
    }
  }
  for (const char* dir : {"fwd", "bwd"})
    for (int64_t d : {64, 128})
      for (int64_t hkv : {8, 2}) {
        const double r = median_of(case_key(dir, hkv, d, 16384, true)) /
                         median_of(case_key(dir, hkv, d, 16384, false));
        print_ratio((case_key(dir, hkv, d, 16384, false) + " causal/full time").c_str(), r,
                    "<= 0.55");
      }
  for (int64_t d : {64, 128}) {
    const std::string naive = "naive/D" + std::to_string(d) + "/S4096";
    print_ratio((naive + " time / flash fwd Hkv8").c_str(),
                median_of(naive) / median_of(case_key("fwd", 8, d, 4096, false)), ">= 1.5");
  }
  const bool dot = detected_isa() == Isa::kAvx512Bf16;
  const bool full_rate = cpattn::bf16_dot_rate().full_rate;
  for (const char* dir : {"fwd", "bwd"}) {
    const std::string fp32 = case_key(dir, 8, 128, 4096, false);
    const bool fwd = dir[0] == 'f';
    print_ratio((fp32 + " fp32 time / bf16 time (auto: " + isa_name(fastest_isa()) + ")").c_str(),
                median_of(fp32) / median_of(fp32 + "/bf16"),
                !fwd        ? nullptr
                : full_rate ? ">= 1.6 (full-rate vdpbf16ps)"
                            : ">= 1.0");
    print_ratio((fp32 + " fp32 time / fp16 time").c_str(),
                median_of(fp32) / median_of(fp32 + "/fp16"), nullptr);
    if (dot) {
      // > 1: vdpbf16ps is the faster bf16 path, which kAuto must then pick; < 1: widened is.
      const std::string widened = case_key(dir, 8, 128, 4096, false, Isa::kAvx512) + "/bf16";
      const std::string on_dot = case_key(dir, 8, 128, 4096, false, Isa::kAvx512Bf16) + "/bf16";
      print_ratio((widened + " time / bf16 vdpbf16ps time").c_str(),
                  median_of(widened) / median_of(on_dot),
                  full_rate ? "> 1 (auto runs vdpbf16ps)" : "< 1 (auto runs widened)");
    }
  }
  if (!std::isnan(median_of("training_memory/bf16"))) {
    std::printf(
        "  fwd+bwd S=65536 D=128 Hq=8 peak MiB: fp32 %.1f (tensors %.1f), bf16 %.1f (tensors "
        "%.1f); bf16 / fp32 %.3f (target: tensors half)\n",
        median_of("training_memory/fp32"), median_of("training_memory/fp32/tensors"),
        median_of("training_memory/bf16"), median_of("training_memory/bf16/tensors"),
        median_of("training_memory/bf16") / median_of("training_memory/fp32"));
  }
  if (!std::isnan(median_of("peak_memory/counted_MiB"))) {
    std::printf(
        "  forward S=65536 D=64 Hq=8 extra memory: counted %.1f MiB, RSS %.1f MiB "
        "(target < 64 MiB)\n",
        median_of("peak_memory/counted_MiB"), median_of("peak_memory/rss_MiB"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("%s\n%s\nOpenBLAS core %s (OPENBLAS_CORETYPE %s; %s)\n",
              cpattn::bench::cpu_line().c_str(), cpattn::bench::isa_line().c_str(),
              openblas_get_corename(), coretype ? coretype : "unset", openblas_get_config());
  benchmark::RunSpecifiedBenchmarks();
  print_summary();
  benchmark::Shutdown();
  return 0;
}
