// The train layer's own small deterministic RNG (SplitMix64 + Box-Muller) for parameter init and
// batch sampling; dropout uses Philox (cpattn/rng.h) instead.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace cpattn::train {

/// One SplitMix64 step as a pure mixing function (Steele, Lea, Flood, "Fast splittable
/// pseudorandom number generators", OOPSLA 2014): a bijective 64-bit finaliser of x + golden.
inline uint64_t splitmix64_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// SplitMix64 stream: state advances by the golden gamma, output is the mixed state. Same seed,
/// same sequence, on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    const uint64_t out = splitmix64_mix(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return out;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n) for n >= 1 (Lemire's multiply-shift; the bias is < n / 2^64).
  uint64_t next_below(uint64_t n) {
    __extension__ typedef unsigned __int128 U128;  // GCC/Clang builtin; pedantic-clean spelling
    return static_cast<uint64_t>((static_cast<U128>(next_u64()) * n) >> 64);
  }
  /// Standard normal via Box-Muller; both values of a pair are used, so draws come in pairs.
  double next_normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - next_double();  // (0, 1]: log stays finite
    const double u2 = next_double();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace cpattn::train
