// `cpattn verify`: runs a sweep of kernel cases against the float64 reference (the slow oracle of
// kernel/reference.h) and prints a table, or JSON with --json; exits 1 if any case fails.
#include "cli/verify.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/verify_report.h"

namespace cpattn::cli {

namespace {
using reference::CaseSpec;
using reference::MaskKind;
using reference::PositionKind;
using L = MemoryLayout;

CaseSpec spec(MaskKind mask, reference::Dims dims, PositionKind positions, float p, L layout,
              uint64_t seed) {
  CaseSpec s;
  s.mask = mask;
  s.dims = dims;
  s.positions = positions;
  s.dropout_p = p;
  s.layout = layout;
  s.seed = seed;
  return s;
}

struct VerifyOptions {
  int threads = 1;
  bool json = false;
};
}  // namespace

std::vector<CaseSpec> default_kernel_cases() {
  // dims: {B, Sq, Sk, Hq, Hkv, Dqk, Dv}
  return {
      spec(MaskKind::kNone, {1, 7, 7, 1, 1, 8, 8}, PositionKind::kContiguous, 0.0f, L::kBSHD, 1),
      spec(MaskKind::kCausal, {1, 97, 1025, 4, 2, 192, 128}, PositionKind::kContiguous, 0.1f,
           L::kBHSD, 2),
      spec(MaskKind::kCausal, {1, 97, 97, 4, 1, 64, 64}, PositionKind::kZigzag, 0.0f, L::kBSHD, 3),
      spec(MaskKind::kWindow, {1, 1025, 97, 2, 2, 40, 40}, PositionKind::kStriped, 0.1f, L::kSBHD,
           4),
      spec(MaskKind::kCausalWindow, {1, 97, 97, 4, 2, 128, 128}, PositionKind::kContiguous, 0.5f,
           L::kBHSD, 5),
      spec(MaskKind::kDocs, {1, 97, 97, 4, 1, 64, 64}, PositionKind::kStriped, 0.1f, L::kBSHD, 6),
      spec(MaskKind::kDocsCausal, {1, 257, 257, 2, 2, 64, 64}, PositionKind::kZigzag, 0.0f,
           L::kSBHD, 7),
      spec(MaskKind::kCausal, {1, 1, 1025, 1, 1, 128, 128}, PositionKind::kContiguous, 0.0f,
           L::kBSHD, 8),
      spec(MaskKind::kNone, {1, 1025, 1, 8, 2, 8, 8}, PositionKind::kContiguous, 0.5f, L::kBHSD, 9),
      spec(MaskKind::kCausal, {1, 1025, 1025, 1, 1, 64, 64}, PositionKind::kZigzag, 0.1f, L::kBSHD,
           10),
      spec(MaskKind::kNone, {3, 7, 97, 4, 1, 24, 8}, PositionKind::kContiguous, 0.1f, L::kBSHD, 11),
      spec(MaskKind::kWindow, {3, 97, 7, 4, 1, 192, 128}, PositionKind::kContiguous, 0.0f, L::kSBHD,
           12),
      spec(MaskKind::kCausalWindow, {1, 97, 1025, 1, 1, 40, 40}, PositionKind::kStriped, 0.5f,
           L::kBSHD, 13),
      spec(MaskKind::kDocsCausal, {1, 97, 97, 8, 2, 8, 8}, PositionKind::kZigzag, 0.5f, L::kBHSD,
           14),
      spec(MaskKind::kCausal, {2, 33, 65, 8, 1, 96, 64}, PositionKind::kStriped, 0.1f, L::kSBHD,
           15),
      spec(MaskKind::kNone, {1, 113, 211, 3, 3, 59, 59}, PositionKind::kContiguous, 0.0f, L::kBHSD,
           16),
  };
}

VerifyResult verify_kernel_case(const CaseSpec& case_spec, int threads) {
  const auto start = std::chrono::steady_clock::now();
  reference::ErrorRow row = reference::check_kernel_case(case_spec, threads);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return {std::move(row), elapsed.count()};
}

Command verify_command() {
  return {"verify", [](CLI::App& app) -> std::function<int()> {
            CLI::App* sub = app.add_subcommand(
                "verify",
                "Check the attention kernel against a float64 reference on a sweep of cases "
                "(masks, GQA, dropout, layouts, odd sizes); exit status 1 if any case fails");
            auto options = std::make_shared<VerifyOptions>();
            sub->add_option("--threads", options->threads, "Kernel worker threads per case")
                ->check(CLI::Range(1, 1024))
                ->capture_default_str();
            sub->add_flag("--json", options->json, "Print the results as JSON");
            return [options] {
              std::vector<VerifyResult> results;
              for (const CaseSpec& s : default_kernel_cases()) {
                results.push_back(verify_kernel_case(s, options->threads));
              }
              const std::string title = "cpattn verify: kernel vs float64 reference, " +
                                        std::to_string(options->threads) + " thread(s)";
              if (options->json) {
                std::printf("%s\n", verify_json(title, results).dump(2).c_str());
              } else {
                print_verify_table(stdout, title, results);
              }
              return all_passed(results) ? 0 : 1;
            };
          }};
}

}  // namespace cpattn::cli
