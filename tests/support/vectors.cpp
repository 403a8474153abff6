// Parses the known-answer vectors shared by the team.
#include "support/vectors.h"

#include <fstream>
#include <stdexcept>
#include <string>

namespace cpattn::testing {

nlohmann::json load_vectors_json() {
  std::ifstream in(CPATTN_TEST_DATA_DIR "/cpattn_vectors.json");
  if (!in) throw std::runtime_error("cannot open " CPATTN_TEST_DATA_DIR "/cpattn_vectors.json");
  return nlohmann::json::parse(in);
}

namespace {
// A float32 value of the file (softcap, slopes, sinks): exactly representable, else an error
// (the kernel could not be given the value the answers were computed with).
float exact_float(const nlohmann::json& x, const std::string& what) {
  const double d = x.get<double>();
  const auto f = static_cast<float>(d);
  if (static_cast<double>(f) != d) throw std::runtime_error(what + " is not a float32 value");
  return f;
}

// A per-head float32 array of the file, or empty for null.
std::vector<float> floats_or_empty(const nlohmann::json& a, const std::string& what) {
  std::vector<float> out;
  if (a.is_null()) return out;
  for (const auto& x : a) out.push_back(exact_float(x, what));
  return out;
}

std::vector<double> doubles_or_neg_inf(const nlohmann::json& a) {
  std::vector<double> out;
  out.reserve(a.size());
  for (const auto& x : a) {
    out.push_back(x.is_null() ? -std::numeric_limits<double>::infinity() : x.get<double>());
  }
  return out;
}
}  // namespace

namespace {
std::vector<GoldenCase> parse_golden_cases() {
  std::vector<GoldenCase> cases;
  // Named, not a temporary: a range-for over a subobject of a temporary would dangle (C++20).
  const nlohmann::json all = load_vectors_json();
  for (const auto& c : all["attention_cases"]) {
    GoldenCase g;
    g.name = c["name"].get<std::string>();
    g.B = c["B"];
    g.Sq = c["Sq"];
    g.Sk = c["Sk"];
    g.Hq = c["Hq"];
    g.Hkv = c["Hkv"];
    g.Dqk = c["Dqk"];
    g.Dv = c["Dv"];
    g.params.softmax_scale = c["softmax_scale"].get<float>();
    g.params.causal = c["causal"];
    g.params.window_left = c["window_left"];
    g.params.window_right = c["window_right"];
    g.params.dropout_p = c["dropout_p"].get<float>();
    g.softmax_scale = c["softmax_scale"].get<double>();
    g.dropout_p = c["dropout_p"].get<double>();
    g.rng = {c["seed"].get<uint64_t>(), c["offset"].get<uint64_t>()};
    g.q_pos = c["q_pos"].get<std::vector<int64_t>>();
    g.k_pos = c["k_pos"].get<std::vector<int64_t>>();
    if (!c["q_doc"].is_null()) g.q_doc = c["q_doc"].get<std::vector<int64_t>>();
    if (!c["k_doc"].is_null()) g.k_doc = c["k_doc"].get<std::vector<int64_t>>();
    g.params.softcap = exact_float(c["softcap"], g.name + ": softcap");
    g.params.alibi_slopes = floats_or_empty(c["alibi_slopes"], g.name + ": alibi_slopes");
    g.params.sink = floats_or_empty(c["sink"], g.name + ": sink");
    if (!c["slices"].is_null()) {
      for (const auto& s : c["slices"]) {
        g.params.slices.push_back({s["q_begin"].get<int64_t>(), s["q_end"].get<int64_t>(),
                                   s["k_begin"].get<int64_t>(), s["k_end"].get<int64_t>(),
                                   parse_slice_type(s["type"].get<std::string>())});
      }
    }
    if (!c["dsink"].is_null()) g.dsink = c["dsink"].get<std::vector<double>>();
    for (auto [field, key] : {std::pair{&g.q, "q"},
                              {&g.k, "k"},
                              {&g.v, "v"},
                              {&g.dout, "dout"},
                              {&g.out, "out"},
                              {&g.lse, "lse"},
                              {&g.dq, "dq"},
                              {&g.dk, "dk"},
                              {&g.dv, "dv"}}) {
      *field = doubles_or_neg_inf(c[key]);
    }
    cases.push_back(std::move(g));
  }
  return cases;
}
}  // namespace

std::vector<GoldenCase> load_golden_cases() {
  // Parsed once per process: several parameterised suites instantiate from it at start-up.
  static const std::vector<GoldenCase> cases = parse_golden_cases();
  return cases;
}

reference::Problem golden_problem(const GoldenCase& g) {
  reference::Problem p;
  p.dims = {g.B, g.Sq, g.Sk, g.Hq, g.Hkv, g.Dqk, g.Dv};
  p.params = g.params;
  p.rng = g.rng;
  p.q_pos = g.q_pos;
  p.k_pos = g.k_pos;
  p.q_doc = g.q_doc;
  p.k_doc = g.k_doc;
  p.q = g.q;
  p.k = g.k;
  p.v = g.v;
  p.dout = g.dout;
  p.exact_scale = g.softmax_scale;
  p.exact_dropout_p = g.dropout_p;
  return p;
}

reference::Outputs golden_outputs(const GoldenCase& g) {
  return {g.out, g.lse, g.dq, g.dk, g.dv, g.dsink};
}

}  // namespace cpattn::testing
