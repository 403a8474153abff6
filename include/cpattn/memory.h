// Memory accounting: every buffer cpattn allocates is counted, so tests can prove that nothing
// outlives its owner (docs/design.md section 6).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cpattn {

/// A snapshot of a MemoryCounter. Bytes, and objects: owners of counted state that a higher layer
/// registers with add_objects (the state layer registers each live ForwardResult; see
/// memory_stats() in attention.h).
struct MemoryStats {
  int64_t live_bytes = 0;    ///< bytes currently allocated through cpattn
  int64_t peak_bytes = 0;    ///< high-water mark of live_bytes since the last reset
  int64_t live_objects = 0;  ///< registered objects currently alive
  int64_t peak_objects = 0;  ///< high-water mark of live_objects since the last reset
};

/// A thread-safe allocation counter. The process has one (process_memory()); an in-process rank
/// owns another so that its usage is reported per rank. Counters form a chain: a child also
/// counts into its parent, so the process total is always complete. Counters are shared-owned:
/// everything charged to one (a Tensor, a ForwardResult, a child counter) keeps it alive, so a
/// result may outlive the rank that made it and still be released into the right counter.
class MemoryCounter : public std::enable_shared_from_this<MemoryCounter> {
  struct Key {};

 public:
  /// A new counter that also counts into `parent` (null: a root counter).
  static std::shared_ptr<MemoryCounter> create(MemoryCounter* parent = nullptr);
  /// Use create(); public only for std::make_shared.
  MemoryCounter(Key, std::shared_ptr<MemoryCounter> parent) : parent_(std::move(parent)) {}
  MemoryCounter(const MemoryCounter&) = delete;
  MemoryCounter& operator=(const MemoryCounter&) = delete;

  /// Records an allocation (bytes > 0) or a release (bytes < 0) here and in every parent.
  void add_bytes(int64_t bytes) noexcept;
  /// Records a registered object created (+1) or destroyed (-1) here and in every parent.
  void add_objects(int64_t count) noexcept;
  MemoryStats stats() const noexcept;
  /// Sets the peaks to the current live values (for measuring one phase).
  void reset_peak() noexcept;

 private:
  std::shared_ptr<MemoryCounter> parent_;
  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> live_objects_{0};
  std::atomic<int64_t> peak_objects_{0};
};

/// The process-wide counter every other counter reports into.
MemoryCounter& process_memory() noexcept;

}  // namespace cpattn
