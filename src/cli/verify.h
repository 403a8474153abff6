// `cpattn verify` building blocks: run one case against the double reference and get its row,
// so other case families (e.g. ring attention with --cp) add a runner and reuse the report.
#pragma once

#include <vector>

#include "cpattn/params.h"
#include "verify/reference_case.h"

namespace cpattn::cli {

/// One line of the verify report: the error row of a case and how long it took (seconds, for
/// the reference and the run together).
struct VerifyResult {
  reference::ErrorRow row;
  double seconds = 0.0;
  /// The case has attention sinks: the report shows a dsink column.
  bool sink = false;
  /// The row judged dsink. False without sinks, and for a run that returned no dsink (the row's
  /// dsink error is then 0 against no answer and the report shows "-").
  bool dsink = false;
};

/// The score and mask features `cpattn verify` adds to every case it runs, the kernel sweep's
/// and the CP cases' alike (--sink, --softcap, --alibi, --slices; AttentionParams, params.h).
struct CaseFeatures {
  bool sink = false;              ///< sink logits per query head, N(0, 2^2) from the case's seed
  float softcap = 0.0f;           ///< > 0: logit softcap; 0: off
  bool alibi = false;             ///< ALiBi slopes 2^(-8 (h + 1) / Hq)
  std::vector<MaskSlice> slices;  ///< on global positions, with the case's own mask
};

/// Sets spec's sink, softcap and alibi from `features` and appends its slices to spec.slices.
void add_features(const CaseFeatures& features, reference::CaseSpec& spec);

/// The default kernel sweep of `cpattn verify`: 16 cases mixing every mask kind, GQA/MQA,
/// Dqk != Dv, dropout, the three memory layouts and odd sizes; a few seconds in total.
std::vector<reference::CaseSpec> default_kernel_cases();

/// Runs one kernel case (spec.layout, `threads` worker threads) against the double reference
/// under the tolerance rule of reference_case.h.
VerifyResult verify_kernel_case(const reference::CaseSpec& spec, int threads);

}  // namespace cpattn::cli
