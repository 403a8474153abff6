// Progress display, metrics file, gnuplot loss curve and summary of `cpattn train`.
#include "cli/train_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cpattn/error.h"

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

ProgressPrinter::ProgressPrinter(int64_t total_steps, std::FILE* out,
                                 const std::string& metrics_path, bool allow_bar)
    : total_(total_steps),
      out_(out),
      tty_(allow_bar && isatty(fileno(out)) == 1),
      every_(std::max<int64_t>(1, total_steps / 20)) {
  if (!metrics_path.empty()) {
    metrics_.open(metrics_path, std::ios::out | std::ios::trunc);
    CPATTN_CHECK(metrics_.is_open(), ErrorCode::kIo, "cannot create metrics file '", metrics_path,
                 "'");
  }
}

void ProgressPrinter::on_step(const train::StepMetrics& m) {
  if (metrics_.is_open()) {
    const nlohmann::json line = {{"step", m.step},
                                 {"loss", m.loss},
                                 {"lr", m.lr},
                                 {"tokens_per_s", m.tokens_per_s},
                                 {"elapsed_s", m.elapsed_s}};
    metrics_ << line.dump() << '\n';
    metrics_.flush();
  }
  // The ETA uses the average step time so far: a single step's time is noisy.
  const double steps_per_s = m.elapsed_s > 0 ? static_cast<double>(m.step) / m.elapsed_s : 0.0;
  const double eta = steps_per_s > 0 ? static_cast<double>(total_ - m.step) / steps_per_s : 0.0;
  const bool last = m.step == total_;
  if (tty_) {
    if (!last && last_draw_s_ >= 0 && m.elapsed_s - last_draw_s_ < 0.1) return;
    last_draw_s_ = m.elapsed_s;
    constexpr int kWidth = 24;
    const auto filled = static_cast<int>(kWidth * m.step / std::max<int64_t>(1, total_));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r[%s] step %lld/%lld | loss %.4f | %s tok/s | ETA %s \x1b[K", bar.c_str(),
                 static_cast<long long>(m.step), static_cast<long long>(total_), m.loss,
                 rate_string(m.tokens_per_s).c_str(), clock_string(eta).c_str());
  } else if (last || m.step % every_ == 0 || m.step == 1) {
    std::fprintf(out_,
                 "step %lld/%lld  loss %.4f  lr %.2e  tokens/s %.0f  elapsed %.1f s  eta %.0f s\n",
                 static_cast<long long>(m.step), static_cast<long long>(total_), m.loss, m.lr,
                 m.tokens_per_s, m.elapsed_s, eta);
  }
  std::fflush(out_);
}

void ProgressPrinter::finish() {
  if (tty_) std::fprintf(out_, "\n");
  std::fflush(out_);
}

void plot_losses(const std::vector<double>& losses, double unigram_entropy,
                 const std::string& png_path) {
  CPATTN_CHECK(png_path.find('"') == std::string::npos, ErrorCode::kInvalidArgument,
               "--plot path must not contain '\"', got ", png_path);
  // Checked here because gnuplot, when it cannot open its output, writes the PNG to stdout.
  CPATTN_CHECK(std::ofstream(png_path, std::ios::out | std::ios::trunc).is_open(), ErrorCode::kIo,
               "cannot create --plot file '", png_path, "'");
  std::FILE* gp = popen("gnuplot > /dev/null", "w");
  CPATTN_CHECK(gp != nullptr, ErrorCode::kIo, "cannot run gnuplot for --plot");
  // GPVAL_TERMINALS lists the terminals this gnuplot was built with.
  std::fprintf(gp,
               "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
               "{ set terminal pngcairo size 900,540 } else { set terminal png size 900,540 }\n"
               "set output \"%s\"\n"
               "set title 'cpattn train: loss per step'\n"
               "set xlabel 'step'\nset ylabel 'cross-entropy (nats per byte)'\n"
               "set grid\nset key top right\n"
               "plot '-' using 1:2 with lines lw 2 title 'training loss', "
               "%.17g with lines dt 2 lw 2 title 'unigram entropy'\n",
               png_path.c_str(), unigram_entropy);
  for (size_t i = 0; i < losses.size(); ++i) std::fprintf(gp, "%zu %.9g\n", i + 1, losses[i]);
  std::fprintf(gp, "e\n");
  const int status = pclose(gp);
  CPATTN_CHECK(status == 0, ErrorCode::kIo, "gnuplot failed (status ", status, ") writing --plot '",
               png_path, "'; is gnuplot installed?");
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
  std::fprintf(out, "weights               %s on every rank\n", s.weight_digest.c_str());
  std::fflush(out);
}

nlohmann::json summary_json(const Summary& s) {
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
          {"weight_digest", s.weight_digest}};
}

}  // namespace cpattn::cli
