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

std::shared_ptr<MemoryCounter> MemoryCounter::create(MemoryCounter* parent) {
  return std::make_shared<MemoryCounter>(Key{}, parent ? parent->shared_from_this() : nullptr);
}

void MemoryCounter::add_bytes(int64_t bytes) noexcept {
  for (MemoryCounter* c = this; c != nullptr; c = c->parent_.get()) {
    add_with_peak(c->live_bytes_, c->peak_bytes_, bytes);
  }
}

void MemoryCounter::add_objects(int64_t count) noexcept {
  for (MemoryCounter* c = this; c != nullptr; c = c->parent_.get()) {
    add_with_peak(c->live_objects_, c->peak_objects_, count);
  }
}

MemoryStats MemoryCounter::stats() const noexcept {
  return {live_bytes_.load(std::memory_order_relaxed), peak_bytes_.load(std::memory_order_relaxed),
          live_objects_.load(std::memory_order_relaxed),
          peak_objects_.load(std::memory_order_relaxed)};
}

void MemoryCounter::reset_peak() noexcept {
  peak_bytes_.store(live_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  peak_objects_.store(live_objects_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryCounter& process_memory() noexcept {
  // The one process-wide counter (statistics only, never forward state). Everything charged to it
  // holds a reference, so it outlives static objects destroyed after this one.
  static const std::shared_ptr<MemoryCounter> counter = MemoryCounter::create();
  return *counter;
}

}  // namespace cpattn
