// `cpattn verify` building blocks: run one case against the double reference and get its row,
// so other case families (e.g. ring attention with --cp) add a runner and reuse the report.
#pragma once

#include <vector>

#include "verify/reference_case.h"

namespace cpattn::cli {

/// One line of the verify report: the error row of a case and how long it took (seconds, for
/// the reference and the run together).
struct VerifyResult {
  reference::ErrorRow row;
  double seconds = 0.0;
};

/// The default kernel sweep of `cpattn verify`: 16 cases mixing every mask kind, GQA/MQA,
/// Dqk != Dv, dropout, the three memory layouts and odd sizes; a few seconds in total.
std::vector<reference::CaseSpec> default_kernel_cases();

/// Runs one kernel case (spec.layout, `threads` worker threads) against the double reference
/// under the tolerance rule of reference_case.h.
VerifyResult verify_kernel_case(const reference::CaseSpec& spec, int threads);

}  // namespace cpattn::cli
