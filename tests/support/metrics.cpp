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

::testing::AssertionResult outputs_near(const reference::Outputs& got,
                                        const reference::Outputs& want, double tol) {
  const std::array<std::pair<const std::vector<double>*, const std::vector<double>*>, 5> pairs = {
      {{&got.out, &want.out},
       {&got.lse, &want.lse},
       {&got.dq, &want.dq},
       {&got.dk, &want.dk},
       {&got.dv, &want.dv}}};
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
