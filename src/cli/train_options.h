// The options of `cpattn train` and the run behind them (cli/train_run.cpp).
#pragma once

#include <string>

#include "train/trainer.h"

namespace cpattn::cli {

/// Everything `cpattn train` was given.
struct TrainOptions {
  train::TrainConfig config;
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string backend = "threads";
  std::string layout = "zigzag";
  std::string strategy = "ring";  ///< --strategy, parsed by parse_strategy
  std::string dtype = "fp32";     ///< --dtype, parsed by parse_dtype
  std::string on_nonfinite = "stop";
  std::string metrics;
  std::string plot;
  std::string save;         ///< --save DIR ("" none)
  int64_t save_every = 50;  ///< --save-every N (0: only at the end and when stopped)
  std::string resume;       ///< --resume DIR ("" none)
  bool overwrite = false;   ///< --overwrite: --save may replace an existing checkpoint
  double timeout_s = 300;   ///< --timeout
  bool check = false;
  bool json = false;
  bool cp_given = false;
};

/// Runs `cpattn train` and returns the process's exit status: 0, 1 (--check failed or a leak),
/// 10 + code for errors, kExitInterrupted / kExitTerminated when stopped by a signal
/// (cli/job.h). Throws cpattn::Error for errors found before any rank starts.
int run_train(TrainOptions options);

}  // namespace cpattn::cli
