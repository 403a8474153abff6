// Generator: hands out the RngState of each attention call (docs/design.md section 4).
#pragma once

#include <cstdint>

#include "cpattn/rng.h"

namespace cpattn {

/// A source of RngStates: the seed is fixed, the offset advances by one per attention call, so
/// every call of a training step draws an independent dropout stream. A plain value owned by the
/// training loop (never global): state()/set_state() let a loop record and replay it, e.g. to
/// restore the RNG before a recompute. Not thread-safe; each rank owns its own (identical) copy.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : state_{seed, offset} {}

  /// Returns the current state and advances offset by 1 (wrapping modulo 2^64).
  RngState next() noexcept {
    const RngState s = state_;
    ++state_.offset;
    return s;
  }
  /// The state the next call to next() returns.
  RngState state() const noexcept { return state_; }
  void set_state(RngState state) noexcept { state_ = state; }

 private:
  RngState state_;
};

}  // namespace cpattn
