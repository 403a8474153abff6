// Counted allocation bookkeeping (see memory.h).
#include "cpattn/memory.h"

namespace cpattn {

namespace {
// live += delta; peak = max(peak, live), lock-free.
void add_with_peak(std::atomic<int64_t>& live, std::atomic<int64_t>& peak, int64_t delta) {
  const int64_t now = live.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

void MemoryCounter::add_bytes(int64_t bytes) noexcept {
  for (MemoryCounter* c = this; c != nullptr; c = c->parent_) {
    add_with_peak(c->live_bytes_, c->peak_bytes_, bytes);
  }
}

void MemoryCounter::add_forward_results(int64_t count) noexcept {
  for (MemoryCounter* c = this; c != nullptr; c = c->parent_) {
    add_with_peak(c->live_forward_results_, c->peak_forward_results_, count);
  }
}

MemoryStats MemoryCounter::stats() const noexcept {
  return {live_bytes_.load(std::memory_order_relaxed), peak_bytes_.load(std::memory_order_relaxed),
          live_forward_results_.load(std::memory_order_relaxed),
          peak_forward_results_.load(std::memory_order_relaxed)};
}

void MemoryCounter::reset_peak() noexcept {
  peak_bytes_.store(live_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  peak_forward_results_.store(live_forward_results_.load(std::memory_order_relaxed),
                              std::memory_order_relaxed);
}

MemoryCounter& process_memory() noexcept {
  // The one process-wide counter: statistics only, never forward state.
  static MemoryCounter counter;
  return counter;
}

}  // namespace cpattn
