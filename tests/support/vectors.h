// Loader for tests/data/cpattn_vectors.json (format: tests/data/README.md).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cpattn/kernel.h"
#include "verify/reference.h"

namespace cpattn::testing {

/// The whole vectors file (parsed once per call; the file is ~0.5 MB).
nlohmann::json load_vectors_json();

/// One float64 golden attention case. Tensors are flat row-major BSHD; lse is [B, Hq, Sq] with
/// -inf for rows that see no key. params also holds the case's softcap, ALiBi slopes, sink
/// logits and mask slices (all float32 values in the file, so params holds them exactly; empty
/// when null); dsink [Hq] is empty without sinks.
struct GoldenCase {
  std::string name;
  int64_t B, Sq, Sk, Hq, Hkv, Dqk, Dv;
  AttentionParams params;
  RngState rng;
  double softmax_scale, dropout_p;  // exact values (params holds them rounded to float)
  std::vector<int64_t> q_pos, k_pos, q_doc, k_doc;  // docs empty when null
  std::vector<double> q, k, v, dout, out, lse, dq, dk, dv, dsink;
};
/// The attention cases of the vectors file (parsed on first use, then copied).
std::vector<GoldenCase> load_golden_cases();

/// The golden case's inputs as a reference::Problem (same params, positions, documents, rng).
reference::Problem golden_problem(const GoldenCase& g);

/// The golden case's answers (out, lse, dq, dk, dv, dsink) in reference::Outputs form.
reference::Outputs golden_outputs(const GoldenCase& g);

}  // namespace cpattn::testing
