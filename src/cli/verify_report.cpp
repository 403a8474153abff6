// Table and JSON rendering of verify results (verify_report.h).
#include "cli/verify_report.h"

#include <algorithm>
#include <cmath>

namespace cpattn::cli {

namespace {
// A case column as wide as the longest name (at least "case").
size_t name_width(const std::vector<VerifyResult>& results) {
  size_t w = 4;
  for (const VerifyResult& r : results) w = std::max(w, r.row.name.size());
  return w;
}

// The tensors the table shows: out, lse, dq, dk, dv, and dsink when some case has sinks.
size_t shown_tensors(const std::vector<VerifyResult>& results) {
  const bool sink =
      std::any_of(results.begin(), results.end(), [](const VerifyResult& r) { return r.sink; });
  return sink ? reference::kTensorNames.size() : reference::kTensorNames.size() - 1;
}

// Whether a row judged tensor t (dsink, the last, only where it was compared).
bool judged(const VerifyResult& r, size_t t) {
  return t + 1 < reference::kTensorNames.size() || r.dsink;
}

std::string rule_text() {
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "err <= %g * err_fp32 + %g + %g ulp(fp32) * magnitude (+ %g ulp(fp32) of max |lse| "
                "* magnitude for dq, dk, dv, dsink)",
                reference::kTolFactor, reference::kTolAbs, reference::kTolUlps,
                reference::kTolLseUlps);
  return buf;
}
}  // namespace

bool all_passed(const std::vector<VerifyResult>& results) {
  return std::all_of(results.begin(), results.end(),
                     [](const VerifyResult& r) { return r.row.pass(); });
}

void print_verify_table(std::FILE* out, const std::string& title,
                        const std::vector<VerifyResult>& results) {
  const int w = static_cast<int>(name_width(results));
  std::fprintf(out, "%s\nrule: %s (max abs error vs float64 reference)\n\n", title.c_str(),
               rule_text().c_str());
  const size_t shown = shown_tensors(results);
  std::fprintf(out, "%-*s      ", w, "case");
  for (size_t t = 0; t < shown; ++t) std::fprintf(out, " %9s", reference::kTensorNames[t]);
  std::fprintf(out, " %8s  %s\n", "ms", "result");
  int failed = 0;
  for (const VerifyResult& r : results) {
    const bool pass = r.row.pass();
    failed += pass ? 0 : 1;
    std::fprintf(out, "%-*s  err ", w, r.row.name.c_str());
    for (size_t t = 0; t < shown; ++t) {
      if (judged(r, t)) {
        std::fprintf(out, " %9.2e", r.row.err[t]);
      } else {
        std::fprintf(out, " %9s", "-");  // a run that returned no dsink
      }
    }
    std::fprintf(out, " %8.0f  %s\n", r.seconds * 1e3, pass ? "PASS" : "FAIL");
    std::fprintf(out, "%-*s  tol ", w, "");
    for (size_t t = 0; t < shown; ++t) {
      if (!judged(r, t)) {
        std::fprintf(out, " %9s", "-");
        continue;
      }
      // Mark the tensors over their tolerance so a failure is easy to spot.
      std::fprintf(out, " %8.2e%c", r.row.tol[t], r.row.err[t] <= r.row.tol[t] ? ' ' : '!');
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "\n%zu cases: %zu passed, %d failed\n", results.size(),
               results.size() - static_cast<size_t>(failed), failed);
}

nlohmann::json verify_json(const std::string& title, const std::vector<VerifyResult>& results) {
  nlohmann::json cases = nlohmann::json::array();
  int failed = 0;
  for (const VerifyResult& r : results) {
    nlohmann::json errors, tolerances;
    for (size_t t = 0; t < r.row.err.size(); ++t) {
      if (!judged(r, t)) continue;
      const char* name = reference::kTensorNames[t];
      errors[name] = std::isfinite(r.row.err[t]) ? nlohmann::json(r.row.err[t]) : nlohmann::json();
      tolerances[name] = r.row.tol[t];
    }
    failed += r.row.pass() ? 0 : 1;
    cases.push_back({{"name", r.row.name},
                     {"pass", r.row.pass()},
                     {"seconds", r.seconds},
                     {"errors", errors},
                     {"tolerances", tolerances}});
  }
  return {{"title", title},   {"rule", rule_text()},
          {"cases", cases},   {"passed", static_cast<int>(results.size()) - failed},
          {"failed", failed}, {"pass", failed == 0}};
}

}  // namespace cpattn::cli
