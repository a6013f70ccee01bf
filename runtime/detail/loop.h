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
#include <vector>
#include <map>
#include <memory>
#include <cstdint>

#include <actorpipe/runtime/detail/function.h>

struct uv_loop_s;
struct uv_async_s;

namespace actorpipe::detail {

// Made with std::make_shared where connections and listeners run on it:
// they keep it alive (weak_from_this), so that one closed or dropped after
// its context is gone finds a finished loop that refuses posts, not freed
// memory.
class Loop : public std::enable_shared_from_this<Loop> {
 public:
  // Room for a pipe operation's closure (its Message, the user's callback
  // and a reference to the pipe: 128 bytes) without a heap allocation.
  using Task = Function<void(), 128>;

  // Something the loop checks by polling rather than through epoll (a
  // shared-memory ring, say). While the loop is busy it calls poll() on every
  // turn; before it blocks, prepareToSleep() must arrange to be woken through
  // an fd the loop watches (and return false if work is already there), and
  // awake() undoes that when the loop resumes. Loop thread only.
  class Poller {
   public:
    virtual ~Poller() = default;
    virtual bool poll() = 0;  // true if it made progress
    virtual bool prepareToSleep() = 0;
    virtual void awake() = 0;
  };

  // Tasks posted by the loop's own tasks run in the same drain, behind
  // them, this many rounds deep before the pollers get their turn.
  static constexpr int kDrainRounds = 4;
  // While a loop with pollers keeps turning, libuv's turn (epoll: sockets,
  // timers) comes once kUvTurnMin has passed; while the pollers keep making
  // progress and kQuietUvTurns turns in a row found nothing, the wait doubles
  // up to kUvTurnMax; it is back to kUvTurnMin after a turn that found
  // something or a spell in which the pollers did nothing (see run()).
  static constexpr std::chrono::microseconds kUvTurnMin{5};
  static constexpr std::chrono::microseconds kUvTurnMax{200};
  static constexpr unsigned kQuietUvTurns = 8;

  explicit Loop(std::string name);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Runs `task` on the loop thread after the tasks posted before it. Returns
  // false, and drops the task, once the loop has finished its last turn.
  bool post(Task task);
  // As post, but the task is made (`make()`, under the queue's lock) only
  // once it is accepted: a refused caller still holds what it would have
  // moved into the task, and can fail it.
  template <typename Make>
  bool postMade(Make&& make) {
    if (inLoop() && !queued_.load(std::memory_order_acquire)) {
      // The loop posting to itself (an operation a callback asks for) while
      // no other thread's task waits: no lock (see local_).
      if (finished_) return false;
      local_.emplace_back(make());
      return true;
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (finished_) return false;
      queue_.emplace_back(make());
      queued_.store(true, std::memory_order_release);
    }
    wakeAfterPost();
    return true;
  }

  // False once the loop's thread has ended, whatever thread asks (a later
  // thread may be given the ended one's id).
  bool inLoop() const { return std::this_thread::get_id() == threadId_.load(std::memory_order_acquire); }
  // Whether the caller may touch what only the loop thread touches: it is
  // the loop thread, or the loop has finished its last turn (no thread runs
  // it any more; whoever tears down may clean up). What loop-only methods
  // assert (ACTORPIPE_DCHECK, runtime/detail/check.h).
  bool ownsState() const;
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Loop thread only.
  uv_loop_s* uv() { return loop_; }
  // Handlers call this when something happened, to keep the loop polling.
  // A flag: the loop reads the clock on its next look (one idle turn in 16).
  // Noted inside libuv's turn, it also keeps that turn coming often.
  void noteActivity() {
    active_ = true;
    ++activity_;
  }

  void setPollWindow(std::chrono::microseconds window) { pollWindow_.store(window.count()); }

  // Loop thread only.
  void addPoller(Poller* poller);
  void removePoller(Poller* poller);

  // Loop thread only: runs `task` on the loop after `delay`, unless
  // cancelled first. Timers still pending when the loop stops never run.
  using TimerId = uint64_t;
  TimerId after(std::chrono::milliseconds delay, Task task);
  void cancel(TimerId id);

  // Runs `teardown` on the loop (it must close every handle the loop's users
  // opened), then lets the loop finish and joins its thread. Idempotent.
  void stop(Task teardown = nullptr);

 private:
  void run();
  void wakeAfterPost();
  bool drainQueue();
  void runBatch(std::vector<Task>& batch);
  bool pollPollers();
  bool prepareToSleep();
  void awake();
  static void onAsync(uv_async_s* handle);

  std::string name_;
  uv_loop_s* loop_{nullptr};
  uv_async_s* async_{nullptr};
  std::thread thread_;
  std::atomic<std::thread::id> threadId_{};

  mutable std::mutex mutex_;
  // Vectors, swapped each turn: their capacity stays, so a busy loop
  // allocates nothing to move its tasks (a deque allocates its map anew).
  std::vector<Task> queue_;
  std::vector<Task> batch_;  // loop thread only: the tasks of this turn
  // Loop thread only: tasks the loop posted to itself while queue_ was empty
  // (as `queued_` told it), so posted before everything now in queue_; a
  // drain runs them first. While queue_ holds a task, the loop's own posts
  // go behind it there. A pipe's callbacks ask for their next operations
  // this way two or three times per message, and each post and each drain
  // took the lock (two atomic operations) on the message's path.
  std::vector<Task> local_;
  std::vector<Task> localBatch_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> queued_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> joined_{false};
  // Written under mutex_ by the loop thread only (which may read it
  // without): the loop will run no more tasks.
  bool finished_{false};
  std::atomic<int64_t> pollWindow_{200};
  std::chrono::steady_clock::time_point lastActivity_{};
  bool active_{false};  // loop thread only: something happened since the last look at the clock
  uint64_t activity_{0};  // loop thread only: noteActivity() calls, to tell whether libuv's turn found work
  std::vector<Poller*> pollers_;
  struct Timer;
  std::map<TimerId, Timer*> timers_;
  TimerId nextTimer_{1};
  size_t preparedPollers_{0};
};

} // namespace actorpipe::detail
