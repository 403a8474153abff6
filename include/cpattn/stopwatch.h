// Wall-clock timing on the steady clock: the one timer of the library, the CLI and the benchmarks.
#pragma once

#include <chrono>

namespace cpattn {

/// Seconds since construction (or the last restart()), on std::chrono::steady_clock.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// Adds the seconds from construction to destruction to *sink (nothing when sink is null).
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* sink) : sink_(sink) {}
  ~ScopedSeconds() {
    if (sink_ != nullptr) *sink_ += watch_.seconds();
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* sink_;
  Stopwatch watch_;
};

}  // namespace cpattn
