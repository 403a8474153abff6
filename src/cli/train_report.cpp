// Progress display, metrics file, gnuplot loss curve and summary of `cpattn train`.
#include "cli/train_report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include "cpattn/error.h"
#include "train/files.h"

namespace cpattn::cli {

namespace {

// "1:05:03" / "4:02" for a duration in seconds.
std::string clock_string(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

// "12.3k" style rate.
std::string rate_string(double per_s) {
  char buf[32];
  if (per_s >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", per_s / 1e6);
  } else if (per_s >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", per_s);
  }
  return buf;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

ProgressPrinter::ProgressPrinter(int64_t first_step, int64_t total_steps, std::FILE* out,
                                 const std::string& metrics_path, bool allow_bar)
    : first_(first_step),
      total_(total_steps),
      out_(out),
      tty_(allow_bar && isatty(fileno(out)) == 1),
      every_(std::max<int64_t>(1, (total_steps - first_step) / 20)),
      metrics_path_(metrics_path) {
  if (!metrics_path.empty()) {
    train::check_creatable(metrics_path, "--metrics");
    metrics_ = std::fopen(metrics_path.c_str(), "w");
    CPATTN_CHECK(metrics_ != nullptr, ErrorCode::kIo, "cannot create --metrics file '",
                 metrics_path, "': ", std::strerror(errno));
  }
}

ProgressPrinter::~ProgressPrinter() {
  if (metrics_ != nullptr) std::fclose(metrics_);  // every line was flushed and checked
}

void ProgressPrinter::fail(const std::string& what, int64_t step) {
  if (failed_.load()) return;
  failure_ =
      detail::str_cat("writing ", what, " failed at step ", step, ": ", std::strerror(errno));
  failed_.store(true);
}

void ProgressPrinter::on_step(const train::StepMetrics& m) {
  if (metrics_ != nullptr) {
    nlohmann::json line = {{"step", m.step},
                           {"loss", m.loss},
                           {"lr", m.lr},
                           {"tokens_per_s", m.tokens_per_s},
                           {"elapsed_s", m.elapsed_s},
                           {"skipped", m.skipped}};
    if (m.eval_loss) line["eval_loss"] = *m.eval_loss;
    const std::string text = line.dump() + "\n";
    if (std::fputs(text.c_str(), metrics_) < 0 || std::fflush(metrics_) != 0) {
      fail("--metrics '" + metrics_path_ + "'", m.step);
      std::fclose(metrics_);
      metrics_ = nullptr;
    }
  }
  if (!out_ok_) return;
  // The ETA uses the average step time so far: a single step's time is noisy.
  const auto done = static_cast<double>(m.step - first_);
  const double steps_per_s = m.elapsed_s > 0 ? done / m.elapsed_s : 0.0;
  const double eta = steps_per_s > 0 ? static_cast<double>(total_ - m.step) / steps_per_s : 0.0;
  const bool last = m.step == total_;
  char eval[48] = "";
  if (m.eval_loss) std::snprintf(eval, sizeof eval, "  eval %.4f", *m.eval_loss);
  const char* skipped = m.skipped ? "  (skipped: non-finite)" : "";
  if (tty_) {
    if (!last && last_draw_s_ >= 0 && m.elapsed_s - last_draw_s_ < 0.1) return;
    last_draw_s_ = m.elapsed_s;
    constexpr int kWidth = 24;
    const auto filled = static_cast<int>(kWidth * m.step / std::max<int64_t>(1, total_));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r[%s] step %lld/%lld | loss %.4f%s | %s tok/s | ETA %s \x1b[K",
                 bar.c_str(), static_cast<long long>(m.step), static_cast<long long>(total_),
                 m.loss, eval, rate_string(m.tokens_per_s).c_str(), clock_string(eta).c_str());
  } else if (last || m.step % every_ == 0 || m.step == first_ + 1 || m.eval_loss || m.skipped) {
    std::fprintf(out_,
                 "step %lld/%lld  loss %.4f%s  lr %.2e  tokens/s %.0f  elapsed %.1f s  eta %.0f "
                 "s%s\n",
                 static_cast<long long>(m.step), static_cast<long long>(total_), m.loss, eval, m.lr,
                 m.tokens_per_s, m.elapsed_s, eta, skipped);
  }
  if (std::fflush(out_) != 0 || std::ferror(out_) != 0) {
    out_ok_ = false;
    fail(out_ == stdout ? "the progress to stdout" : "the progress to stderr", m.step);
  }
}

void ProgressPrinter::finish() {
  if (!out_ok_) return;
  if (tty_) std::fprintf(out_, "\n");
  std::fflush(out_);
}

void print_check(const train::CheckReport& report, std::FILE* out) {
  std::fprintf(out, "check: loss and every parameter gradient at step 0 (tolerance %.0e)\n",
               report.tolerance);
  for (const train::CheckPair& p : report.pairs) {
    const std::string worst =
        p.worst_tensor.empty() ? "every tensor bitwise equal" : "worst " + p.worst_tensor;
    std::fprintf(out, "  %-36s loss rel %.2e  grad rel %.2e (%s)  %s\n", p.name.c_str(), p.loss_rel,
                 p.grad_rel, worst.c_str(), p.passed ? "ok" : "FAIL");
  }
  std::fprintf(out, "check %s\n", report.passed ? "passed" : "FAILED");
  std::fflush(out);
}

nlohmann::json check_json(const train::CheckReport& report) {
  nlohmann::json pairs = nlohmann::json::array();
  for (const train::CheckPair& p : report.pairs) {
    pairs.push_back({{"name", p.name},
                     {"loss_rel", p.loss_rel},
                     {"grad_rel", p.grad_rel},
                     {"worst_tensor", p.worst_tensor},
                     {"passed", p.passed}});
  }
  return {{"passed", report.passed}, {"tolerance", report.tolerance}, {"pairs", pairs}};
}

void print_summary(const Summary& s, std::FILE* out) {
  const char* summed = s.processes > 1 ? " (sum over processes)" : "";
  if (s.end != "completed") {
    std::fprintf(out, "run ended             %s after step %lld of %lld (summary so far)\n",
                 s.end.c_str(), static_cast<long long>(s.steps_done),
                 static_cast<long long>(s.steps));
  }
  if (s.first_step > 0) {
    std::fprintf(out, "resumed               from step %lld\n",
                 static_cast<long long>(s.first_step));
  }
  std::fprintf(out,
               "final loss            %.4f nats/byte (mean of the last %lld steps; first %.4f)\n",
               s.final_loss, static_cast<long long>(s.final_window), s.first_loss);
  const double gap = s.unigram_entropy - s.final_loss;
  std::fprintf(
      out, "unigram entropy       %.4f nats/byte (byte frequencies only; final loss %.4f %s it)\n",
      s.unigram_entropy, std::abs(gap), gap >= 0 ? "below" : "above");
  std::fprintf(out, "throughput            %.0f tokens/s (%lld tokens in %.1f s)\n", s.tokens_per_s,
               static_cast<long long>(s.tokens), s.elapsed_s);
  std::fprintf(out, "peak RSS              %.1f MiB%s\n", mib(s.peak_rss_bytes), summed);
  std::fprintf(out, "cpattn peak bytes     %.1f MiB%s\n", mib(s.cpattn_peak_bytes), summed);
  std::fprintf(out, "live ForwardResults   %lld%s\n",
               static_cast<long long>(s.live_forward_results), summed);
  if (!s.evals.empty()) {
    std::fprintf(out, "held-out loss         %.4f nats/byte after step %lld (%zu evaluations)\n",
                 s.evals.back().loss, static_cast<long long>(s.evals.back().step), s.evals.size());
  }
  if (s.skipped_steps > 0) {
    std::fprintf(out, "skipped steps         %lld (non-finite loss or gradients)\n",
                 static_cast<long long>(s.skipped_steps));
  }
  std::fprintf(out, "weights               %s on every rank\n", s.weight_digest.c_str());
  if (!s.checkpoint.empty()) {
    std::fprintf(out, "checkpoint            %s (step %lld)\n", s.checkpoint.c_str(),
                 static_cast<long long>(s.checkpoint_step));
  }
  std::fflush(out);
}

nlohmann::json summary_json(const Summary& s) {
  nlohmann::json evals = nlohmann::json::array();
  for (const train::EvalPoint& e : s.evals) evals.push_back({{"step", e.step}, {"loss", e.loss}});
  return {{"final_loss", s.final_loss},
          {"final_loss_window", s.final_window},
          {"first_loss", s.first_loss},
          {"unigram_entropy_nats", s.unigram_entropy},
          {"below_entropy_nats", s.unigram_entropy - s.final_loss},
          {"tokens_per_s", s.tokens_per_s},
          {"elapsed_s", s.elapsed_s},
          {"steps", s.steps},
          {"tokens", s.tokens},
          {"peak_rss_bytes", s.peak_rss_bytes},
          {"cpattn_peak_bytes", s.cpattn_peak_bytes},
          {"live_forward_results", s.live_forward_results},
          {"processes", s.processes},
          {"weight_digest", s.weight_digest},
          {"end", s.end},
          {"first_step", s.first_step},
          {"steps_done", s.steps_done},
          {"skipped_steps", s.skipped_steps},
          {"checkpoint", s.checkpoint},
          {"checkpoint_step", s.checkpoint_step},
          {"eval", evals},
          {"final_eval_loss",
           s.evals.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.evals.back().loss)}};
}

}  // namespace cpattn::cli
