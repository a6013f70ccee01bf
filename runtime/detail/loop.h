#pragma once
// One thread running one libuv loop. Everything a transport does, and every
// pipe actor bound to that transport, runs here: a message crosses no thread
// between the socket and the pipe's state machine (see docs/architecture.md).
//
// Vocabulary as in libuv: the loop owns handles (sockets, timers); other
// threads hand it work with post(). After any activity the loop polls for a
// short window instead of sleeping, since a wake-up across CPUs costs ~40 µs.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

struct uv_loop_s;
struct uv_async_s;

namespace actorpipe::detail {

class Loop {
 public:
  using Task = std::function<void()>;

  explicit Loop(std::string name);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Runs `task` on the loop thread after the tasks posted before it. Returns
  // false, and drops the task, once the loop has begun to stop.
  bool post(Task task);

  bool inLoop() const { return std::this_thread::get_id() == threadId_; }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Loop thread only.
  uv_loop_s* uv() { return loop_; }
  // Handlers call this when something happened, to keep the loop polling.
  void noteActivity() { lastActivity_ = std::chrono::steady_clock::now(); }

  void setPollWindow(std::chrono::microseconds window) { pollWindow_.store(window.count()); }

  // Runs `teardown` on the loop (it must close every handle the loop's users
  // opened), then lets the loop finish and joins its thread. Idempotent.
  void stop(Task teardown = nullptr);

 private:
  void run();
  void drainQueue();
  static void onAsync(uv_async_s* handle);

  std::string name_;
  uv_loop_s* loop_{nullptr};
  uv_async_s* async_{nullptr};
  std::thread thread_;
  std::thread::id threadId_;

  std::mutex mutex_;
  std::deque<Task> queue_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> joined_{false};
  std::atomic<int64_t> pollWindow_{200};
  std::chrono::steady_clock::time_point lastActivity_{};
};

} // namespace actorpipe::detail
