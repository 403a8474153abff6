// The trainer's sgemm (train/blas.h): every transpose combination against a double reference on
// odd sizes, beta = 0 leaving C unread, bad sizes refused, the thread setting, and that oneDNN runs
// kernels of the CPU's widest instruction set (a Prescott-style fallback to an older ISA fails
// here).
#include "train/blas.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "cpattn/error.h"
#include "cpattn/isa.h"
#include "grad_check.h"

namespace cpattn::train {
namespace {

using testing::random_vector;

struct Dims {
  int64_t m, n, k;
};

// C = alpha op(A) op(B) + beta C in double, on the same row-major storage sgemm reads.
std::vector<double> reference(bool ta, bool tb, Dims d, float alpha, const std::vector<float>& a,
                              int64_t lda, const std::vector<float>& b, int64_t ldb, float beta,
                              const std::vector<float>& c, int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int64_t i = 0; i < d.m; ++i)
    for (int64_t j = 0; j < d.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < d.k; ++p) {
        const double x =
            ta ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)];
        const double y =
            tb ? b[static_cast<size_t>(j * ldb + p)] : b[static_cast<size_t>(p * ldb + j)];
        s += x * y;
      }
      double& o = out[static_cast<size_t>(i * ldc + j)];
      o = alpha * s + beta * o;
    }
  return out;
}

TEST(Sgemm, EveryTransposeOnOddSizesMatchesTheDoubleReference) {
  uint64_t seed = 1;
  for (Dims d :
       {Dims{1, 1, 1}, Dims{7, 5, 3}, Dims{97, 33, 65}, Dims{3, 130, 1}, Dims{64, 1, 97}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t lda = (ta ? d.m : d.k) + 3, ldb = (tb ? d.k : d.n) + 1, ldc = d.n + 2;
        const auto a = random_vector(static_cast<size_t>((ta ? d.k : d.m) * lda), seed++);
        const auto b = random_vector(static_cast<size_t>((tb ? d.n : d.k) * ldb), seed++);
        std::vector<float> c = random_vector(static_cast<size_t>(d.m * ldc), seed++);
        const auto want = reference(ta, tb, d, 0.5f, a, lda, b, ldb, 2.0f, c, ldc);
        sgemm(ta, tb, d.m, d.n, d.k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
        for (size_t e = 0; e < c.size(); ++e) {
          // fp32 accumulation of k products of |x| <= 1: |error| <= k * 2^-23 * |terms|.
          EXPECT_NEAR(c[e], want[e], 1e-6 * static_cast<double>(d.k + 4))
              << "m" << d.m << " n" << d.n << " k" << d.k << " ta" << ta << " tb" << tb << " @"
              << e;
        }
      }
  }
}

// k = 0: the product is empty and C = beta C (beta = 0 clears C, NaNs included, as BLAS does).
TEST(Sgemm, AnEmptyProductScalesC) {
  std::vector<float> c = {1.0f, 2.0f, std::nanf(""), 4.0f};
  sgemm(false, true, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 1, 0.5f, c.data(), 2);
  EXPECT_EQ(c[0], 0.5f);
  EXPECT_EQ(c[1], 1.0f);
  EXPECT_TRUE(std::isnan(c[2]));
  sgemm(true, false, 2, 2, 0, 1.0f, nullptr, 2, nullptr, 2, 0.0f, c.data(), 2);
  for (float x : c) EXPECT_EQ(x, 0.0f);
}

// beta = 0 never reads C (BLAS semantics): the training job's intermediates are allocated unset
// (Tensor::uninitialized) and written by sgemm, so NaN and inf left in C must not reach the
// result. Every transpose, the job's shapes and odd ones, on 1 and 2 threads.
TEST(Sgemm, BetaZeroIgnoresWhatCHeld) {
  uint64_t seed = 11;
  const int before = blas_threads();
  for (int threads : {1, 2}) {
    set_blas_threads(threads);
    for (Dims d : {Dims{512, 256, 128}, Dims{128, 128, 512}, Dims{97, 33, 65}, Dims{1, 7, 3}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n, ldc = d.n;
          const auto a = random_vector(static_cast<size_t>((ta ? d.k : d.m) * lda), seed++);
          const auto b = random_vector(static_cast<size_t>((tb ? d.n : d.k) * ldb), seed++);
          std::vector<float> c(static_cast<size_t>(d.m * ldc));
          for (size_t e = 0; e < c.size(); ++e) {
            c[e] = e % 2 == 0 ? std::nanf("") : -std::numeric_limits<float>::infinity();
          }
          const std::vector<float> zeros(c.size(), 0.0f);
          const auto want = reference(ta, tb, d, 1.0f, a, lda, b, ldb, 0.0f, zeros, ldc);
          sgemm(ta, tb, d.m, d.n, d.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), ldc);
          for (size_t e = 0; e < c.size(); ++e) {
            ASSERT_NEAR(c[e], want[e], 1e-6 * static_cast<double>(d.k + 4))
                << threads << " threads, m" << d.m << " n" << d.n << " k" << d.k << " ta" << ta
                << " tb" << tb << " @" << e;
          }
        }
    }
  }
  set_blas_threads(before);
}

TEST(Sgemm, BadSizesAreRefused) {
  std::vector<float> x(64);
  EXPECT_THROW(sgemm(false, false, -1, 2, 2, 1, x.data(), 2, x.data(), 2, 0, x.data(), 2), Error);
  try {
    sgemm(false, false, 2, 4, 3, 1, x.data(), 2, x.data(), 4, 0, x.data(), 4);  // lda < k
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("lda = 2"));
  }
  sgemm(false, false, 0, 4, 3, 1, nullptr, 3, nullptr, 4, 0, nullptr, 4);  // empty: nothing read
}

TEST(Sgemm, ThreadSettingIsProcessWideAndChecked) {
  const int before = blas_threads();
  set_blas_threads(2);
  EXPECT_EQ(blas_threads(), 2);
  int seen = 0;
  std::thread([&] { seen = blas_threads(); }).join();
  EXPECT_EQ(seen, 2);
  EXPECT_THAT(blas_summary(), ::testing::HasSubstr("2 threads"));
  set_blas_threads(before);
  EXPECT_THROW(set_blas_threads(0), Error);
}

// What the CPU offers, the products use: an AVX-512 CPU gets oneDNN's avx512_core kernels (or
// wider), an AVX2 one avx2 kernels. OpenBLAS 0.3.21's Prescott fallback on an Emerald Rapids CPU
// is the failure this catches.
TEST(Sgemm, RunsKernelsOfTheCpusWidestInstructionSet) {
  EXPECT_TRUE(blas_isa_matches_cpu())
      << blas_summary() << " on a CPU whose widest kernel path is " << isa_name(detected_isa());
  EXPECT_THAT(blas_summary(), ::testing::StartsWith("oneDNN "));
  if (detected_isa() == Isa::kAvx512 || detected_isa() == Isa::kAvx512Bf16) {
    EXPECT_THAT(blas_isa(), ::testing::StartsWith("avx512_core"));
  }
}

}  // namespace
}  // namespace cpattn::train
