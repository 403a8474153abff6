// Shared by the benchmark programs: values recorded per case across repetitions (seconds, MiB,
// ratios) and their medians, for the summaries printed after the Google Benchmark table.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace cpattn::bench {

/// Every value recorded under a case key, one entry per run (a benchmark repetition).
inline std::map<std::string, std::vector<double>>& samples() {
  static std::map<std::string, std::vector<double>> s;
  return s;
}

inline void record(const std::string& key, double value) { samples()[key].push_back(value); }

/// Median of the values recorded under key; NaN when there are none (the case was filtered out).
inline double median_of(const std::string& key) {
  const auto it = samples().find(key);
  if (it == samples().end() || it->second.empty()) return NAN;
  std::vector<double> v = it->second;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace cpattn::bench
