// Counted allocation bookkeeping (see memory.h).
#include "cpattn/memory.h"

namespace cpattn {

void MemoryCounter::add_bytes(int64_t bytes) noexcept {
  for (MemoryCounter* c = this; c != nullptr; c = c->parent_) {
    const int64_t now = c->live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = c->peak_bytes_.load(std::memory_order_relaxed);
    while (now > peak &&
           !c->peak_bytes_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
}

void MemoryCounter::add_forward_results(int64_t count) noexcept {
  for (MemoryCounter* c = this; c != nullptr; c = c->parent_) {
    c->live_forward_results_.fetch_add(count, std::memory_order_relaxed);
  }
}

MemoryStats MemoryCounter::stats() const noexcept {
  return {live_bytes_.load(std::memory_order_relaxed), peak_bytes_.load(std::memory_order_relaxed),
          live_forward_results_.load(std::memory_order_relaxed)};
}

void MemoryCounter::reset_peak() noexcept {
  peak_bytes_.store(live_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryCounter& process_memory() noexcept {
  // The one process-wide counter: statistics only, never forward state.
  static MemoryCounter counter;
  return counter;
}

}  // namespace cpattn
