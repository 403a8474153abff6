// A minimal fork-join loop for the kernel drivers: std::thread workers pulling item indices from
// one atomic counter (dynamic scheduling balances causal work; items write disjoint outputs, so
// results do not depend on which thread ran what).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace cpattn::detail {

/// Number of workers parallel_for will use for n_items with at most max_threads threads.
inline int worker_count(int64_t n_items, int max_threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(n_items, max_threads)));
}

/// Calls fn(item, worker) for item in [0, n_items) on worker_count(n_items, max_threads) workers;
/// worker is in [0, workers) and identifies per-worker scratch. With one worker everything runs
/// inline on the calling thread (no thread is created). `interrupt` (may be null) is called
/// before each item, an interruption point. The first exception thrown by fn or interrupt is
/// rethrown after all workers stopped.
template <typename Fn>
void parallel_for(int64_t n_items, int max_threads, const std::function<void()>* interrupt,
                  Fn&& fn) {
  const auto item = [&](int64_t i, int worker) {
    if (interrupt != nullptr) (*interrupt)();
    fn(i, worker);
  };
  const int workers = worker_count(n_items, max_threads);
  if (workers == 1) {
    for (int64_t i = 0; i < n_items; ++i) item(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](int worker) {
    try {
      for (int64_t i = next.fetch_add(1); i < n_items; i = next.fetch_add(1)) item(i, worker);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(n_items);  // the others stop at their next item
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers - 1));
  for (int w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(work, w);
    } catch (const std::system_error&) {
      break;  // out of threads: the workers already running (and this one) take every item
    }
  }
  work(0);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace cpattn::detail
