// Linear forward/backward as three sgemm calls (blas.h).
#include "train/linear.h"

#include "cpattn/error.h"
#include "train/blas.h"
#include "train/check.h"

namespace cpattn::train {

namespace {
void check_dims(const char* op, const LinearDims& d) {
  detail::check_at_least(op, "N", d.n, 0);
  detail::check_at_least(op, "in", d.in, 1);
  detail::check_at_least(op, "out", d.out, 1);
}
}  // namespace

void linear_forward(LinearDims d, std::span<const float> x, std::span<const float> w,
                    std::span<const float> b, std::span<float> y) {
  constexpr const char* kOp = "linear_forward";
  check_dims(kOp, d);
  detail::check_matrix(kOp, "x", "[N, in]", x.size(), d.n, d.in);
  detail::check_matrix(kOp, "w", "[out, in]", w.size(), d.out, d.in);
  if (!b.empty()) detail::check_matrix(kOp, "b", "[1, out]", b.size(), 1, d.out);
  detail::check_matrix(kOp, "y", "[N, out]", y.size(), d.n, d.out);
  if (d.n == 0) return;
  float beta = 0.0f;
  if (!b.empty()) {
    // Seed y with the bias and let sgemm add x W^T on top (beta = 1).
    for (int64_t r = 0; r < d.n; ++r) {
      float* yr = y.data() + r * d.out;
      for (int64_t o = 0; o < d.out; ++o) yr[o] = b[static_cast<size_t>(o)];
    }
    beta = 1.0f;
  }
  // y[N, out] = x[N, in] * w[out, in]^T
  sgemm(false, true, d.n, d.out, d.in, 1.0f, x.data(), d.in, w.data(), d.in, beta, y.data(), d.out);
}

void linear_backward(LinearDims d, std::span<const float> dy, std::span<const float> x,
                     std::span<const float> w, std::span<float> dx, std::span<float> dw,
                     std::span<float> db) {
  constexpr const char* kOp = "linear_backward";
  check_dims(kOp, d);
  detail::check_matrix(kOp, "dy", "[N, out]", dy.size(), d.n, d.out);
  detail::check_matrix(kOp, "x", "[N, in]", x.size(), d.n, d.in);
  detail::check_matrix(kOp, "w", "[out, in]", w.size(), d.out, d.in);
  if (!dx.empty()) detail::check_matrix(kOp, "dx", "[N, in]", dx.size(), d.n, d.in);
  detail::check_matrix(kOp, "dw", "[out, in]", dw.size(), d.out, d.in);
  if (!db.empty()) detail::check_matrix(kOp, "db", "[1, out]", db.size(), 1, d.out);
  if (d.n == 0) return;
  if (!dx.empty()) {
    // dx[N, in] = dy[N, out] * w[out, in]
    sgemm(false, false, d.n, d.in, d.out, 1.0f, dy.data(), d.out, w.data(), d.in, 0.0f, dx.data(),
          d.in);
  }
  // dw[out, in] += dy[N, out]^T * x[N, in]
  sgemm(true, false, d.out, d.in, d.n, 1.0f, dy.data(), d.out, x.data(), d.in, 1.0f, dw.data(),
        d.in);
  if (!db.empty()) {
    // Row order is fixed (r ascending), so db is deterministic run to run.
    for (int64_t r = 0; r < d.n; ++r) {
      const float* dyr = dy.data() + r * d.out;
      for (int64_t o = 0; o < d.out; ++o) db[static_cast<size_t>(o)] += dyr[o];
    }
  }
}

}  // namespace cpattn::train
