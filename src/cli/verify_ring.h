// `cpattn verify --cp ...`: the ring (in-process ranks) against the double reference, with the
// kernel's tolerance rule applied to the gathered whole-sequence results.
#pragma once

#include <cstdio>
#include <vector>

#include "kernel/reference_case.h"

namespace cpattn::cli {

/// Runs a fixed set of ring cases (causal GQA with dropout, packed documents with MQA, a sliding
/// window with Dqk 192 / Dv 128; odd lengths so some chunks differ) for every P in cp_sizes and
/// every layout; returns one row per case, named like "Causal_GQA8x2_..._zigzag_cp4".
/// Throws Error(kInvalidArgument) for a P < 1.
std::vector<reference::ErrorRow> verify_ring(const std::vector<int>& cp_sizes);

/// Prints rows as "PASS|FAIL name  out err/tol ..." lines to `out`; returns the number failing.
int print_ring_rows(const std::vector<reference::ErrorRow>& rows, std::FILE* out);

}  // namespace cpattn::cli
