// What attention sinks, logit softcap, ALiBi and mask slices cost in the single-rank kernel
// (docs/performance.md, "Sinks, softcap, ALiBi and slices"), as ratios measured in one run:
//  1. each score feature (and all three together) against the plain kernel, forward and backward,
//     S = 4096, D = 128, Hq = Hkv = 8, fp32, full and causal (target <= 1.05);
//  2. a prefix-LM mask given as two slices (the first S/4 positions seen by every query, causal
//     after) against the full mask, per visible pair: time / (visible pairs x the full mask's
//     time per pair), S = 16384 (target <= 1.10).
// Variants run in interleaved rounds (plain, then each variant, rotating the order every round),
// and every ratio is the median of its rounds' ratios, so the host's drift cancels.
// Usage: bench_features [--rounds N] [--seq S] [--prefix-seq S] [--heads-prefix H]
//        [--section features|prefix|all]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"
#include "cpattn/isa.h"
#include "cpattn/kernel.h"
#include "cpattn/mask.h"
#include "machine.h"

namespace {

using cpattn::AttentionParams;
using cpattn::Tensor;
constexpr int kThreads = 2;

struct Options {
  int rounds = 5;
  int64_t seq = 4096;
  int64_t prefix_seq = 16384;
  int64_t prefix_heads = 2;
  std::string section = "all";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_features: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds") {
      o.rounds = std::atoi(value().c_str());
    } else if (a == "--seq") {
      o.seq = std::atoll(value().c_str());
    } else if (a == "--prefix-seq") {
      o.prefix_seq = std::atoll(value().c_str());
    } else if (a == "--heads-prefix") {
      o.prefix_heads = std::atoll(value().c_str());
    } else if (a == "--section") {
      o.section = value();
    } else {
      std::fprintf(stderr,
                   "usage: bench_features [--rounds N] [--seq S] [--prefix-seq S] "
                   "[--heads-prefix H] [--section features|prefix|all]\n");
      std::exit(2);
    }
  }
  return o;
}

void fill_random(Tensor& t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  for (float& x : t.span()) x = nd(gen);
}

// One B = 1 self-attention problem, H = Hq = Hkv heads of D = 128, contiguous positions, with its
// forward outputs and backward buffers.
struct Problem {
  Problem(int64_t s, int64_t h)
      : q({1, s, h, 128}),
        k({1, s, h, 128}),
        v({1, s, h, 128}),
        dout({1, s, h, 128}),
        out({1, s, h, 128}),
        dq({1, s, h, 128}),
        dk({1, s, h, 128}),
        dv({1, s, h, 128}),
        lse({1, h, s}),
        dsink({h}),
        pos(static_cast<size_t>(s)) {
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    fill_random(dout, 4);
    for (int64_t i = 0; i < s; ++i) pos[static_cast<size_t>(i)] = i;
  }
  cpattn::AttentionInputs inputs() const {
    return {q.view(), k.view(), v.view(), pos, pos, {}, {}};
  }
  double forward(const AttentionParams& params) {
    const auto t0 = std::chrono::steady_clock::now();
    cpattn::attention_kernel_forward(inputs(), params, {}, out.view(), lse.span(), {kThreads});
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double backward(const AttentionParams& params) {
    cpattn::BackwardOptions opt;
    opt.kernel.num_threads = kThreads;
    if (!params.sink.empty()) opt.dsink = dsink.span();
    const auto t0 = std::chrono::steady_clock::now();
    cpattn::attention_kernel_backward(inputs(), params, {}, dout.view(), std::as_const(out).view(),
                                      lse.span(), dq.view(), dk.view(), dv.view(), opt);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Tensor q, k, v, dout, out, dq, dk, dv, lse, dsink;
  std::vector<int64_t> pos;
};

struct Variant {
  std::string name;
  AttentionParams params;
};

// Runs every variant's forward then backward once per round, the order rotated each round, and
// records seconds under "<variant>/fwd" and "<variant>/bwd".
void run_rounds(Problem& p, const std::vector<Variant>& variants, int rounds,
                const std::string& tag) {
  for (const Variant& v : variants) {  // warm-up: scratch, pages, caches
    p.forward(v.params);
    p.backward(v.params);
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t n = 0; n < variants.size(); ++n) {
      const Variant& v = variants[(n + static_cast<size_t>(r)) % variants.size()];
      cpattn::bench::record(tag + v.name + "/fwd", p.forward(v.params));
      cpattn::bench::record(tag + v.name + "/bwd", p.backward(v.params));
    }
  }
}

// The median over rounds of a / b, pairing the two keys' samples round by round.
double paired_ratio(const std::string& a, const std::string& b) {
  const std::vector<double>& x = cpattn::bench::samples()[a];
  const std::vector<double>& y = cpattn::bench::samples()[b];
  std::vector<double> r;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) r.push_back(x[i] / y[i]);
  std::sort(r.begin(), r.end());
  return r.empty() ? NAN : r[r.size() / 2];
}

void features_section(const Options& o) {
  constexpr int64_t kHeads = 8;
  Problem p(o.seq, kHeads);
  std::printf(
      "\nScore features vs the plain kernel: S = %lld, D = 128, Hq = Hkv = %lld, fp32, %d "
      "threads, %d rounds (time ratio, median of rounds; target <= 1.05)\n",
      static_cast<long long>(o.seq), static_cast<long long>(kHeads), kThreads, o.rounds);
  std::printf("| mask | feature | fwd ms | fwd / plain | bwd ms | bwd / plain |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const bool causal : {false, true}) {
    AttentionParams plain;
    plain.causal = causal;
    std::vector<Variant> variants = {{"plain", plain}};
    AttentionParams sink = plain, cap = plain, alibi = plain, all = plain;
    for (int64_t h = 0; h < kHeads; ++h) {
      sink.sink.push_back(0.25f * static_cast<float>(h) - 1.0f);
      alibi.alibi_slopes.push_back(std::exp2(-8.0f * static_cast<float>(h + 1) / kHeads));
    }
    cap.softcap = 5.0f;  // scores ~ N(0, 1): the cap bends them (Gemma 2 uses 50 on larger logits)
    all.sink = sink.sink;
    all.softcap = cap.softcap;
    all.alibi_slopes = alibi.alibi_slopes;
    variants.push_back({"sink", sink});
    variants.push_back({"softcap", cap});
    variants.push_back({"alibi", alibi});
    variants.push_back({"sink+softcap+alibi", all});
    const std::string tag = causal ? "causal/" : "full/";
    run_rounds(p, variants, o.rounds, tag);
    for (const Variant& v : variants) {
      const std::string key = tag + v.name;
      std::printf("| %s | %s | %.1f | %.3f | %.1f | %.3f |\n", causal ? "causal" : "full",
                  v.name.c_str(), 1e3 * cpattn::bench::median_of(key + "/fwd"),
                  paired_ratio(key + "/fwd", tag + "plain/fwd"),
                  1e3 * cpattn::bench::median_of(key + "/bwd"),
                  paired_ratio(key + "/bwd", tag + "plain/bwd"));
    }
  }
}

void prefix_section(const Options& o) {
  const int64_t s = o.prefix_seq, prefix = s / 4;
  Problem p(s, o.prefix_heads);
  AttentionParams full, prefix_lm;
  prefix_lm.slices = {{0, s, 0, prefix, cpattn::SliceType::kFull},
                      {prefix, s, prefix, s, cpattn::SliceType::kCausal}};
  const int64_t pairs_full = s * s;
  const int64_t pairs_prefix = cpattn::count_visible_pairs(p.pos, p.pos, {}, {}, prefix_lm);
  run_rounds(p, {{"full", full}, {"prefix_lm", prefix_lm}}, o.rounds, "prefix/");
  std::printf(
      "\nPrefix-LM as two slices (prefix %lld of S = %lld) vs the full mask, per visible pair: "
      "D = 128, Hq = Hkv = %lld, fp32, %d threads, %d rounds; visible pairs %.4f of S^2 "
      "(target <= 1.10)\n",
      static_cast<long long>(prefix), static_cast<long long>(s),
      static_cast<long long>(o.prefix_heads), kThreads, o.rounds,
      static_cast<double>(pairs_prefix) / static_cast<double>(pairs_full));
  std::printf("| pass | full s | prefix-LM s | time / (pairs x full time per pair) |\n");
  std::printf("|---|---|---|---|\n");
  for (const char* pass : {"fwd", "bwd"}) {
    const std::string a = std::string("prefix/prefix_lm/") + pass;
    const std::string b = std::string("prefix/full/") + pass;
    std::printf(
        "| %s | %.3f | %.3f | %.3f |\n", pass, cpattn::bench::median_of(b),
        cpattn::bench::median_of(a),
        paired_ratio(a, b) * static_cast<double>(pairs_full) / static_cast<double>(pairs_prefix));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("%s\n%s\n", cpattn::bench::cpu_line().c_str(), cpattn::bench::isa_line().c_str());
  if (o.section == "all" || o.section == "features") features_section(o);
  if (o.section == "all" || o.section == "prefix") prefix_section(o);
  return 0;
}
