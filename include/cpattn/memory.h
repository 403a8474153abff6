// Memory accounting: every buffer cpattn allocates is counted, so tests can prove that nothing
// outlives its owner (DESIGN.md section 6).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cpattn {

/// A snapshot of counted allocations. Units: bytes; live_forward_results is a count.
struct MemoryStats {
  int64_t live_bytes = 0;            ///< bytes currently allocated through cpattn
  int64_t peak_bytes = 0;            ///< high-water mark of live_bytes since the last reset
  int64_t live_forward_results = 0;  ///< ForwardResult objects currently alive
  int64_t peak_forward_results = 0;  ///< high-water mark of live_forward_results since reset
};

/// A thread-safe allocation counter. The process has one (process_memory()); an in-process rank
/// can own another so that its usage is reported per rank. Counters form a chain: a child also
/// counts into its parent, so the process total is always complete.
class MemoryCounter {
 public:
  explicit MemoryCounter(MemoryCounter* parent = nullptr) : parent_(parent) {}
  MemoryCounter(const MemoryCounter&) = delete;
  MemoryCounter& operator=(const MemoryCounter&) = delete;

  /// Records an allocation (bytes > 0) or a release (bytes < 0) here and in every parent.
  void add_bytes(int64_t bytes) noexcept;
  /// Records a ForwardResult created (+1) or destroyed (-1).
  void add_forward_results(int64_t count) noexcept;
  MemoryStats stats() const noexcept;
  /// Sets the peaks to the current live values (for measuring one phase).
  void reset_peak() noexcept;

 private:
  MemoryCounter* parent_;
  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> live_forward_results_{0};
  std::atomic<int64_t> peak_forward_results_{0};
};

/// The process-wide counter every other counter reports into.
MemoryCounter& process_memory() noexcept;

/// Stats of the whole process (all ranks running in it).
inline MemoryStats memory_stats() noexcept { return process_memory().stats(); }

}  // namespace cpattn
