// Error metrics and GoogleTest assertions for comparing attention results.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "verify/reference_case.h"

namespace cpattn::testing {

/// True when a and b hold the same number of elements with identical bits.
inline bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}
inline bool bitwise_equal(std::span<const double> a, std::span<const double> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

/// Succeeds when every tensor (out, lse, dq, dk, dv, dsink) of a and b is bitwise equal; the
/// failure message names the tensors that differ.
::testing::AssertionResult outputs_bitwise_equal(const reference::Outputs& a,
                                                 const reference::Outputs& b);

/// Largest |x| over the finite entries (0 for an empty or all-infinite vector).
double max_magnitude(const std::vector<double>& x);

/// max |got - want| / max(max_magnitude(want), 1e-30); equal infinities count as exact.
double relative_error(const std::vector<double>& got, const std::vector<double>& want);

/// Succeeds when every tensor present in both (out, lse, dq, dk, dv, dsink) has relative_error <=
/// tol;
/// the failure message lists each tensor's error.
::testing::AssertionResult outputs_near(const reference::Outputs& got,
                                        const reference::Outputs& want, double tol);

/// Succeeds when every tensor of the row is within its tolerance; the message is the whole row.
::testing::AssertionResult row_passes(const reference::ErrorRow& row);

/// "out err 1.2e-07 tol 3.0e-07, lse ..." for failure messages.
std::string describe(const reference::ErrorRow& row);

}  // namespace cpattn::testing
