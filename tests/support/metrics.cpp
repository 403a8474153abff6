// Error metrics for attention comparisons (see metrics.h).
#include "support/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace cpattn::testing {

double max_magnitude(const std::vector<double>& x) {
  double m = 0.0;
  for (double e : x) {
    if (std::isfinite(e)) m = std::max(m, std::fabs(e));
  }
  return m;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  return reference::max_abs_error(got, want) / std::max(max_magnitude(want), 1e-30);
}

namespace {
// The tensors of two Outputs side by side, in kTensorNames order.
std::array<std::pair<const std::vector<double>*, const std::vector<double>*>,
           reference::kTensorNames.size()>
tensor_pairs(const reference::Outputs& a, const reference::Outputs& b) {
  return {{{&a.out, &b.out},
           {&a.lse, &b.lse},
           {&a.dq, &b.dq},
           {&a.dk, &b.dk},
           {&a.dv, &b.dv},
           {&a.dsink, &b.dsink}}};
}
}  // namespace

::testing::AssertionResult outputs_bitwise_equal(const reference::Outputs& a,
                                                 const reference::Outputs& b) {
  const auto pairs = tensor_pairs(a, b);
  std::string differ;
  for (size_t t = 0; t < pairs.size(); ++t) {
    if (!bitwise_equal(*pairs[t].first, *pairs[t].second)) {
      differ += std::string(differ.empty() ? "" : ", ") + reference::kTensorNames[t];
    }
  }
  if (differ.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not bitwise equal: " << differ;
}

::testing::AssertionResult outputs_near(const reference::Outputs& got,
                                        const reference::Outputs& want, double tol) {
  const auto pairs = tensor_pairs(got, want);
  bool ok = true;
  std::string message;
  for (size_t t = 0; t < pairs.size(); ++t) {
    const auto [g, w] = pairs[t];
    if (g->empty() || w->empty()) continue;
    const double e = relative_error(*g, *w);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s rel err %.2e (tol %.1e); ", reference::kTensorNames[t], e,
                  tol);
    message += buf;
    ok = ok && e <= tol;
  }
  return ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << message;
}

std::string describe(const reference::ErrorRow& row) {
  std::string s = row.name + ":";
  for (size_t t = 0; t < row.err.size(); ++t) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), " %s err %.2e tol %.2e%s", reference::kTensorNames[t],
                  row.err[t], row.tol[t], row.err[t] <= row.tol[t] ? "" : " <-- FAIL");
    s += buf;
  }
  return s;
}

::testing::AssertionResult row_passes(const reference::ErrorRow& row) {
  return row.pass() ? ::testing::AssertionSuccess() << describe(row)
                    : ::testing::AssertionFailure() << describe(row);
}

}  // namespace cpattn::testing
