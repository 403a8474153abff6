// gnuplot detection, the --plot pre-flight check and the atomic loss-curve drawing.
#include "cli/plot.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cpattn/error.h"
#include "train/files.h"

namespace cpattn::cli {

std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  const std::string dirs = path;
  size_t at = 0;
  while (at <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = end > at ? dirs.substr(at, end - at) : ".";
    std::string candidate = dir;
    candidate += "/gnuplot";
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    at = end + 1;
  }
  return "";
}

void check_plot_possible(const std::string& png_path) {
  CPATTN_CHECK(png_path.find('"') == std::string::npos, ErrorCode::kInvalidArgument,
               "--plot path must not contain '\"', got ", png_path);
  CPATTN_CHECK(!find_gnuplot().empty(), ErrorCode::kIo,
               "--plot needs gnuplot, which is not in PATH (install gnuplot, or drop --plot)");
  train::check_creatable(png_path, "--plot");
  train::check_creatable(train::temporary_path(png_path), "--plot");
}

void plot_losses(const std::vector<double>& losses, const std::vector<train::EvalPoint>& evals,
                 double unigram_entropy, const std::string& png_path) {
  check_plot_possible(png_path);
  const std::string tmp = train::temporary_path(png_path);
  train::clear_temporary(png_path);      // gnuplot opens its output following links
  std::string command = find_gnuplot();  // a PATH entry: quoted for the shell of popen
  command.insert(0, 1, '\'');
  command += "' > /dev/null";
  std::FILE* gp = popen(command.c_str(), "w");
  CPATTN_CHECK(gp != nullptr, ErrorCode::kIo, "cannot run gnuplot for --plot");
  // GPVAL_TERMINALS lists the terminals this gnuplot was built with.
  std::fprintf(gp,
               "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
               "{ set terminal pngcairo size 900,540 } else { set terminal png size 900,540 }\n"
               "set output \"%s\"\n"
               "set title 'cpattn train: loss per step'\n"
               "set xlabel 'step'\nset ylabel 'cross-entropy (nats per byte)'\n"
               "set grid\nset key top right\n"
               "plot '-' using 1:2 with lines lw 2 title 'training loss'%s, "
               "%.17g with lines dt 2 lw 2 title 'unigram entropy'\n",
               tmp.c_str(),
               evals.empty() ? "" : ", '-' using 1:2 with linespoints lw 2 title 'held-out loss'",
               unigram_entropy);
  for (size_t i = 0; i < losses.size(); ++i) {
    if (std::isfinite(losses[i])) std::fprintf(gp, "%zu %.9g\n", i + 1, losses[i]);
  }
  std::fprintf(gp, "e\n");
  if (!evals.empty()) {
    for (const train::EvalPoint& e : evals) {
      std::fprintf(gp, "%lld %.9g\n", static_cast<long long>(e.step), e.loss);
    }
    std::fprintf(gp, "e\n");
  }
  const int status = pclose(gp);
  struct stat st {};
  const bool drawn = ::stat(tmp.c_str(), &st) == 0 && st.st_size > 0;
  if (status != 0 || !drawn) {
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::kIo, detail::str_cat("gnuplot failed (status ", status,
                                                ") drawing --plot '", png_path, "'"));
  }
  train::commit_file(tmp, png_path);
}

}  // namespace cpattn::cli
