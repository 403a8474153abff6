// Stop flags set by signal handlers, read by the training loop at step boundaries.
#include "cli/signals.h"

#include <csignal>

namespace cpattn::cli {

namespace {

// The one thing a handler may do: set a flag (not-forward-state: a signal number, no tensors).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal_number) { g_stop_signal = signal_number; }

void install(int signal_number) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(signal_number, &action, nullptr);
}

}  // namespace

void install_stop_handlers() {
  install(SIGINT);
  install(SIGTERM);
}

train::StopRequest signal_stop_request() {
  switch (g_stop_signal) {
    case SIGINT:
      return train::StopRequest::kInterrupt;
    case SIGTERM:
      return train::StopRequest::kTerminate;
    default:
      return train::StopRequest::kNone;
  }
}

void ignore_sigpipe() { std::signal(SIGPIPE, SIG_IGN); }

}  // namespace cpattn::cli
