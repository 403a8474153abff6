// What `cpattn train` shows: the per-step progress (bar on a terminal, plain lines otherwise),
// the --metrics JSONL file and the final summary (the --plot loss curve is cli/plot.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace cpattn::cli {

/// Receives rank 0's StepMetrics. On a terminal (isatty, and allow_bar) redraws one progress-bar
/// line "[#####.....] step 120/400 | loss 2.345 | 12.3k tok/s | ETA 0:42" at most 10 times a
/// second; otherwise prints a plain line about 20 times per run. Appends one JSON object per step
/// {"step", "loss", "lr", "tokens_per_s", "elapsed_s", "skipped"[, "eval_loss"]} to
/// `metrics_path` when not empty, flushed line by line. Every write is checked: the first that
/// fails (a full disk, a closed pipe) is recorded (failure()) and that stream is not written
/// again; the training loop polls failed() to stop at the next step boundary.
class ProgressPrinter {
 public:
  /// first_step: updates done before this run (a resumed run counts its ETA from there).
  /// allow_bar = false forces plain lines (mpirun hands its ranks a pseudo-terminal even when
  /// its own output goes to a file). Throws Error(kIo) when metrics_path cannot be created.
  ProgressPrinter(int64_t first_step, int64_t total_steps, std::FILE* out,
                  const std::string& metrics_path, bool allow_bar);
  ~ProgressPrinter();
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

  /// Never throws.
  void on_step(const train::StepMetrics& m);
  /// Ends the progress-bar line (call once after the last step).
  void finish();
  /// True once a write failed; safe to call from any thread.
  bool failed() const { return failed_.load(); }
  /// "writing --metrics 'm.jsonl' failed at step 3: No space left on device" (empty when none).
  /// Call from the thread that calls on_step, or after training.
  const std::string& failure() const { return failure_; }

 private:
  void fail(const std::string& what, int64_t step);

  int64_t first_;
  int64_t total_;
  std::FILE* out_;
  bool tty_;
  int64_t every_;  // plain-line period in steps
  double last_draw_s_ = -1.0;
  std::string metrics_path_;
  std::FILE* metrics_ = nullptr;
  bool out_ok_ = true;
  std::string failure_;
  std::atomic<bool> failed_{false};
};

/// Prints the three comparisons of --check, one line each, and the verdict.
void print_check(const train::CheckReport& report, std::FILE* out);
/// The check as JSON: {"passed", "tolerance", "pairs": [{"name", "loss_rel", "grad_rel",
/// "worst_tensor", "passed"}]}.
nlohmann::json check_json(const train::CheckReport& report);

/// The numbers of the final summary (see print_summary for their meaning).
struct Summary {
  std::string end = "completed";  ///< completed | interrupted | terminated | output_failed |
                                  ///< nonfinite
  int64_t first_step = 0;         ///< updates done before this invocation (resumed from)
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;
  std::string checkpoint;  ///< the checkpoint file written last ("" when none)
  int64_t checkpoint_step = -1;
  std::vector<train::EvalPoint> evals;
  double final_loss = 0.0;
  int64_t final_window = 0;  ///< steps averaged into final_loss
  double first_loss = 0.0;
  double unigram_entropy = 0.0;
  double tokens_per_s = 0.0;
  double elapsed_s = 0.0;
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t peak_rss_bytes = 0;
  int64_t cpattn_peak_bytes = 0;
  int64_t live_forward_results = 0;
  int processes = 1;  ///< > 1 under MPI: RSS, peak bytes and live states are summed over them
  std::string weight_digest;
};

/// Human-readable summary, one number per line with what it means.
void print_summary(const Summary& s, std::FILE* out);
nlohmann::json summary_json(const Summary& s);

}  // namespace cpattn::cli
