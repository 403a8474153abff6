// Fuzz target: the planner's inputs (plan_strategies and recommend, cpattn/plan.h): the problem
// (batch, length, heads, dims, mask, dropout, documents, layout, group size) and the link and
// kernel models, from the bytes as they are (any float, NaN included). Sizes are bounded (S up
// to 4096 tokens, 64 ranks, 64 documents) so that one input plans in milliseconds; within them
// every value is reachable, the invalid ones included.
// Properties: an invalid problem or model is refused with Error(kInvalidArgument) and a one-line
// message; a valid one gets one estimate per candidate strategy, in candidate order, feasible
// ones with finite, non-negative figures, and recommend() picks the fastest feasible one.
#include <cmath>
#include <vector>

#include "cpattn/plan.h"
#include "fuzz/fuzz_support.h"

namespace {

using cpattn::fuzz::require;

bool finite_nonnegative(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cpattn::fuzz::Input in(data, size);
  cpattn::PlanProblem p;
  p.B = in.take_in(-1, 8);
  p.S = in.take_in(-2, 4096);
  p.Hq = in.take_in(-1, 64);
  p.Hkv = in.take_in(-1, 64);
  p.Dqk = in.take_in(-1, 256);
  p.Dv = in.take_in(-1, 256);
  const auto flags = in.take<uint8_t>();
  if (flags & 1) p.params.softmax_scale = in.take<float>();
  p.params.causal = (flags & 2) != 0;
  p.params.window_left = in.take_in(-3, 5000);
  p.params.window_right = in.take_in(-3, 5000);
  p.params.dropout_p = (flags & 4) ? in.take<float>() : 0.0f;
  const int64_t docs = (flags & 8) ? in.take_in(0, 64) : 0;
  for (int64_t i = 0; i < docs; ++i) p.doc_lengths.push_back(in.take_in(-1, 4096));
  p.layout = static_cast<cpattn::Layout>(in.take_in(-1, 3));
  p.cp_size = static_cast<int>(in.take_in(-1, 64));
  cpattn::LinkModel link;
  cpattn::KernelModel kernel;
  if (flags & 16) {
    link.bandwidth_bytes_per_s = in.take<double>();
    link.latency_s = in.take<double>();
    link.overlap = in.take<double>();
    kernel.flops_per_s = in.take<double>();
    kernel.concurrent_ranks = static_cast<int>(in.take_in(-1, 128));
    kernel.copy_bytes_per_s = in.take<double>();
  }
  cpattn::fuzz::expect_clean_refusal(
      [&] {
        const std::vector<cpattn::StrategyEstimate> estimates =
            cpattn::plan_strategies(p, link, kernel);
        const std::vector<cpattn::Strategy> candidates = cpattn::candidate_strategies(p.cp_size);
        require(estimates.size() == candidates.size(), "not one estimate per candidate");
        const cpattn::StrategyEstimate* fastest = nullptr;
        for (size_t i = 0; i < estimates.size(); ++i) {
          const cpattn::StrategyEstimate& e = estimates[i];
          require(e.strategy.kind == candidates[i].kind &&
                      e.strategy.ulysses_size == candidates[i].ulysses_size &&
                      e.strategy.ring_size == candidates[i].ring_size,
                  "estimates out of candidate order");
          if (!e.feasible) {
            require(!e.reason.empty(), "an infeasible strategy without a reason");
            continue;
          }
          for (const double x : {e.flops, e.bytes_sent, e.peak_bytes, e.compute_seconds,
                                 e.comm_seconds, e.copy_seconds, e.seconds}) {
            require(finite_nonnegative(x), "a figure that is negative or not finite");
          }
          require(e.messages >= 0, "a negative message count");
          if (fastest == nullptr || e.seconds < fastest->seconds) fastest = &e;
        }
        if (fastest != nullptr) {
          require(&cpattn::recommend(estimates) == fastest, "recommend() is not the fastest");
        } else {
          cpattn::recommend(estimates);  // must refuse: none is feasible
          require(false, "recommend() returned with no feasible strategy");
        }
      },
      {cpattn::ErrorCode::kInvalidArgument});
  return 0;
}
