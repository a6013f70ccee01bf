#pragma once

// map(n, fn, args...): n worker threads run fn(args..., workerIndex).
//
// Workers are plain threads, not actors, because fn may block (read a
// channel, load a file); a blocking fn on a scheduler thread would stall
// every actor sharing it.

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace actorpipe::dataflow {

namespace detail {

struct NoResult {};

template <class R>
struct MapState {
  using Slot = std::conditional_t<std::is_void_v<R>, NoResult, std::optional<R>>;
  explicit MapState(std::size_t n) : results(n), errors(n), workerDone(n) {}
  std::vector<Slot> results;
  std::vector<std::exception_ptr> errors;
  // A worker's slots may be read by other threads once its flag is set.
  std::vector<std::atomic<bool>> workerDone;
  std::atomic<std::size_t> finished{0};
  std::atomic<bool> failed{false};
};

} // namespace detail

template <class R>
class MapHandle {
public:
  MapHandle(MapHandle&&) noexcept = default;
  MapHandle& operator=(MapHandle&&) noexcept = default;
  MapHandle(const MapHandle&) = delete;

  // Threads are always joined, even if nobody calls join().
  ~MapHandle() { joinThreads(); }

  // Waits for every worker. Returns the results in worker order (nothing
  // for a void fn); if any worker threw, rethrows the exception of the
  // lowest-indexed failed worker, after all have finished.
  auto join() {
    joinThreads();
    for (auto& error : state_->errors)
      if (error)
        std::rethrow_exception(error);
    if constexpr (std::is_void_v<R>) {
      return;
    } else {
      std::vector<R> results;
      results.reserve(state_->results.size());
      for (auto& slot : state_->results)
        results.push_back(std::move(*slot));
      return results;
    }
  }

  // Non-blocking: rethrows the first error of the workers that have already
  // failed; returns normally otherwise.
  void checkErrors() const {
    if (!state_->failed.load())
      return;
    for (std::size_t i = 0; i < state_->errors.size(); ++i)
      if (state_->workerDone[i].load(std::memory_order_acquire) && state_->errors[i])
        std::rethrow_exception(state_->errors[i]);
  }

  bool done() const { return state_->finished.load() == threads_.size(); }
  std::size_t size() const { return threads_.size(); }

  // Built by map().
  MapHandle(std::shared_ptr<detail::MapState<R>> state, std::vector<std::thread> threads)
    : state_(std::move(state)), threads_(std::move(threads)) {
  }

private:
  void joinThreads() {
    for (auto& thread : threads_)
      if (thread.joinable())
        thread.join();
  }

  std::shared_ptr<detail::MapState<R>> state_;
  std::vector<std::thread> threads_;
};

template <class Fn, class... Args>
auto map(std::size_t n, Fn fn, Args... args) {
  using R = std::invoke_result_t<Fn&, Args&..., std::size_t>;
  auto state = std::make_shared<detail::MapState<R>>(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t index = 0; index < n; ++index) {
    // Each worker gets its own copy of fn and the arguments; channels and
    // tensors are handles, so copies still share the underlying data.
    threads.emplace_back([state, index, fn, args...]() mutable {
      try {
        if constexpr (std::is_void_v<R>)
          fn(args..., index);
        else
          state->results[index].emplace(fn(args..., index));
      } catch (...) {
        state->errors[index] = std::current_exception();
        state->failed.store(true, std::memory_order_release);
      }
      state->workerDone[index].store(true, std::memory_order_release);
      state->finished.fetch_add(1, std::memory_order_release);
    });
  }
  return MapHandle<R>(std::move(state), std::move(threads));
}

} // namespace actorpipe::dataflow
