// The training job's matrix products (docs/performance.md, "Training job"): the trainer's sgemm
// (train/blas.h, oneDNN) against OpenBLAS's cblas_sgemm as loaded (its core as detected, or as
// OPENBLAS_CORETYPE forces it), both on one thread (the trainer runs one BLAS thread per rank) and
// against the one-thread FMA peak of the widest ISA measured in the same run. Shapes: the
// linear layers of `cpattn train` at its defaults (d_model 128, 8 x 256 tokens over 4 ranks: 512
// token rows a rank; QKV 128 -> 256, MLP 128 -> 512 -> 128) and at d_model 256 / seq 4096, plus
// the square 2048^3. The first lines say which core OpenBLAS and oneDNN run.
//     build/release/bench/bench_blas --benchmark_repetitions=3
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_support.h"
#include "cpattn/isa.h"
#include "machine.h"
#include "train/blas.h"

namespace {

namespace bench = cpattn::bench;
using cpattn::Isa;

// The widest fp32 FMA path (avx512bf16's fp32 FMAs are avx512's).
Isa fma_isa() {
  const Isa d = cpattn::detected_isa();
  return d == Isa::kAvx512Bf16 ? Isa::kAvx512 : d;
}

void BM_FmaPeakOneThread(benchmark::State& state) {
  for (auto _ : state) {
    double best = 0;
    for (int run = 0; run < 5; ++run) best = std::max(best, bench::fma_peak_gflops(fma_isa(), 1));
    bench::record("peak", best);
    state.counters["GFLOPS"] = best;
  }
  state.SetLabel(cpattn::isa_name(fma_isa()));
}

// Args: m, n, k, transposes (0: C = A B^T as linear forward, 1: A^T B as the weight gradient), lib
// (0 trainer/oneDNN, 1 OpenBLAS).
void BM_Sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool weight_grad = state.range(3) != 0, openblas = state.range(4) != 0;
  // forward: A [m, k], B [n, k] (B^T); weight gradient: A [k, m] (A^T), B [k, n].
  std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f),
      c(static_cast<size_t>(m * n));
  const int64_t lda = weight_grad ? m : k, ldb = weight_grad ? n : k;
  cpattn::train::set_blas_threads(1);
  openblas_set_num_threads(1);
  const auto run = [&] {
    if (openblas) {
      cblas_sgemm(CblasRowMajor, weight_grad ? CblasTrans : CblasNoTrans,
                  weight_grad ? CblasNoTrans : CblasTrans, int(m), int(n), int(k), 1.0f, a.data(),
                  int(lda), b.data(), int(ldb), 0.0f, c.data(), int(n));
    } else {
      cpattn::train::sgemm(weight_grad, !weight_grad, m, n, k, 1.0f, a.data(), lda, b.data(), ldb,
                           0.0f, c.data(), n);
    }
    benchmark::DoNotOptimize(c.data());
  };
  run();  // oneDNN generates its kernel at the first call of a shape
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) run();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      double(state.iterations());
  const double gflops = 2.0 * double(m) * double(n) * double(k) / secs / 1e9;
  bench::record(std::string(openblas ? "openblas/" : "trainer/") + std::to_string(m) + "x" +
                    std::to_string(n) + "x" + std::to_string(k) + (weight_grad ? "/wgrad" : ""),
                gflops);
  state.counters["GFLOPS"] = gflops;
  state.counters["vs_peak"] = gflops / bench::median_of("peak");
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "wgrad", "openblas"});
  for (int64_t lib : {0, 1}) {
    b->Args({512, 256, 128, 0, lib});    // QKV at the train defaults (512 token rows a rank)
    b->Args({512, 512, 128, 0, lib});    // MLP up
    b->Args({512, 128, 512, 0, lib});    // MLP down
    b->Args({128, 128, 512, 1, lib});    // a weight gradient: sums over the token rows
    b->Args({4096, 1024, 256, 0, lib});  // MLP up at d_model 256, seq 4096, one rank
    b->Args({2048, 2048, 2048, 0, lib});
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_FmaPeakOneThread)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sgemm)->Apply(shapes);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("%s\n%s\nOpenBLAS core %s (OPENBLAS_CORETYPE %s); trainer: %s\n",
              bench::cpu_line().c_str(), bench::isa_line().c_str(), openblas_get_corename(),
              coretype ? coretype : "unset", cpattn::train::blas_summary().c_str());
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\nmedian GFLOPS, one thread (FMA peak %.1f):\n", bench::median_of("peak"));
  for (const auto& [key, values] : bench::samples()) {
    if (key.rfind("trainer/", 0) != 0) continue;
    const std::string rest = key.substr(8);
    const double mine = bench::median_of(key), theirs = bench::median_of("openblas/" + rest);
    std::printf("  %-22s trainer %7.1f (%.3f of peak)  OpenBLAS %7.1f  trainer / OpenBLAS %.2f\n",
                rest.c_str(), mine, mine / bench::median_of("peak"), theirs, mine / theirs);
  }
  benchmark::Shutdown();
  return 0;
}
