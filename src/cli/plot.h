// The --plot loss curve of `cpattn train` (gnuplot): checked before training, drawn into a
// temporary file and renamed over the target only when complete.
#pragma once

#include <string>
#include <vector>

#include "train/trainer.h"

namespace cpattn::cli {

/// The path of gnuplot when it is an executable in $PATH, "" otherwise.
std::string find_gnuplot();

/// Throws Error(kIo) now, before any training, when the plot could not be drawn at the end:
/// gnuplot is not in $PATH, or png_path is a directory or its directory is missing or not
/// writable; Error(kInvalidArgument) when png_path contains '"'. Touches no file.
void check_plot_possible(const std::string& png_path);

/// Draws the loss per step, the held-out loss (when `evals` is not empty) and a dashed line at
/// the unigram entropy into temporary_path(png_path) with gnuplot (pngcairo when this gnuplot
/// has it, else png), then renames it over png_path: an existing file is replaced only by a
/// complete plot. Non-finite losses (skipped steps) are left out. Throws Error(kIo) when gnuplot
/// fails or writes nothing.
void plot_losses(const std::vector<double>& losses, const std::vector<train::EvalPoint>& evals,
                 double unigram_entropy, const std::string& png_path);

}  // namespace cpattn::cli
