// Signals of `cpattn train`: SIGINT and SIGTERM ask the training loop to stop (in-process ranks
// inside the step in progress, MPI processes at the next step boundary; a second SIGINT or
// SIGTERM kills at once: the default action is restored when the first arrives); SIGPIPE is
// ignored so that a closed stdout is a write error the program reports, not a silent death.
#pragma once

#include <atomic>

#include "train/trainer.h"

namespace cpattn::cli {

/// Installs the SIGINT and SIGTERM handlers (each only sets a flag; SA_RESETHAND restores the
/// default action, so the same signal a second time terminates the process).
void install_stop_handlers();

/// kInterrupt after SIGINT, kTerminate after SIGTERM (the later one if both came), else kNone.
/// Async-signal-safe to call from any thread.
train::StopRequest signal_stop_request();

/// True once SIGINT or SIGTERM arrived: the flag for TrainHooks::stop_requested (and
/// CpOptions::stop_requested), which stops a step at its next interruption point.
const std::atomic<bool>* signal_stop_flag();

/// Ignores SIGPIPE for the whole process (writes to a closed pipe fail with EPIPE instead).
void ignore_sigpipe();

}  // namespace cpattn::cli
