// Stop flags set by signal handlers, read by the training loop at step boundaries and, for
// in-process ranks, at the interruption points inside a step.
#include "cli/signals.h"

#include <atomic>
#include <csignal>

namespace cpattn::cli {

namespace {

// The one thing a handler may do: set a flag (not-forward-state: a signal number, no tensors).
// A lock-free atomic is async-signal-safe and, unlike a volatile sig_atomic_t, may also be read
// by the rank threads that poll it.
std::atomic<std::sig_atomic_t> g_stop_signal{0};
std::atomic<bool> g_stop_requested{false};  // set after g_stop_signal: its reader finds the signal
static_assert(std::atomic<std::sig_atomic_t>::is_always_lock_free);
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_stop_signal(int signal_number) {
  g_stop_signal.store(signal_number);
  g_stop_requested.store(true);
}

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
  switch (g_stop_signal.load()) {
    case SIGINT:
      return train::StopRequest::kInterrupt;
    case SIGTERM:
      return train::StopRequest::kTerminate;
    default:
      return train::StopRequest::kNone;
  }
}

const std::atomic<bool>* signal_stop_flag() { return &g_stop_requested; }

void ignore_sigpipe() { std::signal(SIGPIPE, SIG_IGN); }

}  // namespace cpattn::cli
