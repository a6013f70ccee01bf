#pragma once

// Low-level synchronisation shared by the dataflow primitives.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace actorpipe::dataflow::detail {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Guards channel state. Critical sections are a handful of instructions, so
// spinning beats std::mutex, whose contended path sleeps in the kernel and
// costs a ~40 us wake-up on these VMs. Yields after a short spin so a
// preempted holder on an oversubscribed machine gets the CPU back.
class SpinLock {
public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire))
        return;
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64)
          cpuRelax();
        else
          std::this_thread::yield();
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed)
           && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

private:
  std::atomic<bool> locked_{false};
};

// A one-shot-per-round flag a thread can sleep on; `select` registers one with
// every channel it watches.
class Signal {
public:
  void raise() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      raised_ = true;
    }
    cv_.notify_all();
  }
  // Returns false on timeout. Consumes the raise.
  template <class Clock, class Duration>
  bool wait_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock<std::mutex> guard(mutex_);
    if (!cv_.wait_until(guard, deadline, [this] { return raised_; }))
      return false;
    raised_ = false;
    return true;
  }
  void wait() {
    std::unique_lock<std::mutex> guard(mutex_);
    cv_.wait(guard, [this] { return raised_; });
    raised_ = false;
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool raised_ = false;
};

using Clock = std::chrono::steady_clock;

} // namespace actorpipe::dataflow::detail
