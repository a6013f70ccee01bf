#include <actorpipe/runtime/detail/loop.h>

#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/log.h>

#include <pthread.h>
#include <uv.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace actorpipe::detail {

void dcheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "actorpipe: contract broken at %s:%d: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

bool dchecksEnabled() {
#ifdef ACTORPIPE_ENABLE_DCHECKS
  return true;
#else
  return false;
#endif
}

Loop::Loop(std::string name) : name_(std::move(name)) {
  loop_ = new uv_loop_t;
  uv_loop_init(loop_);
  async_ = new uv_async_t;
  uv_async_init(loop_, async_, &Loop::onAsync);
  async_->data = this;
  std::atomic<bool> started{false};
  thread_ = std::thread([this, &started] {
    threadId_.store(std::this_thread::get_id(), std::memory_order_release);
    // "ap." and the loop's name, as `top -H` and debuggers show it (the
    // kernel keeps 15 bytes).
    std::string thread = ("ap." + name_).substr(0, 15);
    pthread_setname_np(pthread_self(), thread.c_str());
    started.store(true, std::memory_order_release);
    run();
  });
  // inLoop() must answer correctly from the first post() on.
  while (!started.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
}

Loop::~Loop() {
  stop();
  uv_loop_close(loop_);
  delete loop_;
  delete async_;
}

bool Loop::post(Task task) {
  if (inLoop() && !queued_.load(std::memory_order_acquire)) {
    if (finished_) return false;
    local_.push_back(std::move(task));
    return true;
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // Accepted until the loop has drained its queue for the last time: a
    // task refused here is one the loop thread can never be running, so the
    // caller may do its work itself (an actor must not be cleaned up in the
    // middle of its own activation).
    if (finished_) {
      return false;
    }
    queue_.push_back(std::move(task));
    queued_.store(true, std::memory_order_release);
  }
  wakeAfterPost();
  return true;
}

void Loop::wakeAfterPost() {
  // The loop sets `sleeping_` before its last look at the queue, so either it
  // sees this task or we see it asleep and wake it (both sides are seq_cst).
  if (!inLoop() && sleeping_.load()) {
    uv_async_send(async_);
  }
}

void Loop::onAsync(uv_async_s* handle) {
  static_cast<Loop*>(handle->data)->noteActivity();
}

bool Loop::drainQueue() {
  // Checked without the lock on every turn of a polling loop.
  if (local_.empty() && !queued_.load(std::memory_order_acquire)) {
    return false;
  }
  // What the tasks post runs in this drain too, behind them, a few rounds
  // deep: a pipe's callback that asks for the next read or write posts it
  // (PipeCore::postNext), and waiting for the next turn put a poll of every
  // poller (a look at each peer's ring counters) on the message's path,
  // twice per message. Bounded, so that a task that posts itself again and
  // again cannot keep the pollers and sockets waiting.
  // The loop's own posts (local_) were all made while queue_ was empty, so
  // before whatever queue_ holds now: they run first, then queue_'s. Posts
  // made while these run wait for the next round.
  bool ran = false;
  for (int round = 0; round < kDrainRounds; ++round) {
    localBatch_.swap(local_);
    if (queued_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> guard(mutex_);
      batch_.swap(queue_);
      queued_.store(false, std::memory_order_relaxed);
    }
    if (localBatch_.empty() && batch_.empty()) break;
    if (!ran) noteActivity();
    ran = true;
    runBatch(localBatch_);
    runBatch(batch_);
  }
  return ran;
}

void Loop::runBatch(std::vector<Task>& batch) {
  // By index, and cleared only after: a task may post (to local_ or
  // queue_), never drain, so the batch stays put while it runs.
  for (size_t i = 0; i < batch.size(); ++i) {
    Task& task = batch[i];
    // A user callback that throws must not take the loop (and every pipe on
    // it) down with it: report and carry on.
    try {
      task();
    } catch (...) {
      logEscaped("a task on loop", name_.c_str());
    }
  }
  batch.clear();
}

struct Loop::Timer {
  uv_timer_t handle;
  Loop* loop;
  TimerId id;
  Task task;
};

bool Loop::ownsState() const {
  if (inLoop()) return true;
  std::lock_guard<std::mutex> guard(mutex_);
  return finished_;
}

Loop::TimerId Loop::after(std::chrono::milliseconds delay, Task task) {
  ACTORPIPE_DCHECK(ownsState());
  auto* timer = new Timer{uv_timer_t{}, this, nextTimer_++, std::move(task)};
  uv_timer_init(loop_, &timer->handle);
  timer->handle.data = timer;
  uv_timer_start(&timer->handle, [](uv_timer_t* handle) {
    auto* t = static_cast<Timer*>(handle->data);
    Task task = std::move(t->task);
    t->loop->cancel(t->id);
    t->loop->noteActivity();
    task();
  }, static_cast<uint64_t>(delay.count()), 0);
  timers_[timer->id] = timer;
  return timer->id;
}

void Loop::cancel(TimerId id) {
  ACTORPIPE_DCHECK(ownsState());
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  Timer* t = it->second;
  timers_.erase(it);
  uv_timer_stop(&t->handle);
  uv_close(reinterpret_cast<uv_handle_t*>(&t->handle),
           [](uv_handle_t* h) { delete static_cast<Timer*>(h->data); });
}

void Loop::addPoller(Poller* poller) {
  ACTORPIPE_DCHECK(ownsState());
  pollers_.push_back(poller);
}

void Loop::removePoller(Poller* poller) {
  ACTORPIPE_DCHECK(ownsState());
  auto it = std::find(pollers_.begin(), pollers_.end(), poller);
  if (it != pollers_.end()) {
    pollers_.erase(it);
  }
}

bool Loop::pollPollers() {
  bool progress = false;
  // By index: a poller's work may add or remove pollers.
  for (size_t i = 0; i < pollers_.size(); ++i) {
    // A poller runs callbacks (a ring's reads and writes complete in them):
    // as with a task, one that throws is reported and the loop carries on,
    // rather than ending the process from the loop thread.
    try {
      progress = pollers_[i]->poll() || progress;
    } catch (...) {
      logEscaped("a poller on loop", name_.c_str());
      progress = true;
    }
  }
  if (progress) {
    noteActivity();
  }
  return progress;
}

bool Loop::prepareToSleep() {
  preparedPollers_ = 0;
  for (size_t i = 0; i < pollers_.size(); ++i) {
    ++preparedPollers_;
    if (!pollers_[i]->prepareToSleep()) {
      return false;
    }
  }
  return true;
}

void Loop::awake() {
  for (size_t i = 0; i < preparedPollers_ && i < pollers_.size(); ++i) {
    pollers_[i]->awake();
  }
  preparedPollers_ = 0;
}

// One turn: run posted tasks, poll the pollers, look at the sockets. While
// anything happened within the poll window the loop keeps turning; then it
// arms the pollers' wake-ups and blocks in epoll.
void Loop::run() {
  constexpr auto kUvTurnWhileWorking = std::chrono::microseconds(50);
  unsigned idleTurns = 0;
  unsigned turnsWithoutUv = 0;
  std::chrono::steady_clock::time_point lastUvTurn{};
  auto uvTurnEvery = kUvTurnMin;
  unsigned quietUvTurns = 0;
  bool ringsWorked = false;  // a poller made progress since libuv's last turn
  for (;;) {
    bool worked = drainQueue();
    const bool polled = pollPollers();
    ringsWorked = ringsWorked || polled;
    worked = polled || worked;
    if (stopping_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> guard(mutex_);
      if (queue_.empty() && local_.empty()) {
        finished_ = true;
        break;
      }
    }
    // libuv's turn is an epoll_wait system call (and a clock read): 0.4 µs
    // on this VM when it is quiet, 2 µs or more when it is not, as long as
    // several polling turns, and a ring's message that arrives during it
    // waits. Taken every 5 µs while a loop polled idly, it held a polling
    // loop 40% of the time and doubled an shm round trip in the VM's slow
    // state (docs/benchmarks.md, "libuv's turn backs off"). So with pollers
    // to watch, libuv gets a turn once uvTurnEvery has passed (50 µs at
    // least while the loop keeps working; the clock is read one turn in
    // 16), and a turn that worked is rarely followed by a system call before
    // what it posted (the write a read's callback asked for) runs.
    // uvTurnEvery doubles, up to kUvTurnMax, only while the rings keep
    // working and libuv's turns keep finding nothing (kQuietUvTurns in a
    // row): a loop serving only busy rings makes that system call once per
    // 200 µs. It is back to kUvTurnMin after a turn that found something, and
    // whenever the rings did nothing since the last one (there is no message
    // of theirs to delay then): a tcp pipe beside idle shm connections keeps
    // its 5 µs, and so does one whose messages keep coming beside a busy shm
    // pipe. The price: beside busy rings, a socket event or timer after a
    // quiet spell waits up to 200 µs.
    std::chrono::steady_clock::time_point now{};  // read at most once a turn
    if (pollers_.empty()) {
      uv_run(loop_, UV_RUN_NOWAIT);
    } else if (++turnsWithoutUv % 16 == 0) {
      now = std::chrono::steady_clock::now();
      if (now - lastUvTurn >= (worked ? std::max(uvTurnEvery, kUvTurnWhileWorking) : uvTurnEvery)) {
        lastUvTurn = now;
        turnsWithoutUv = 0;
        const uint64_t before = activity_;
        uv_run(loop_, UV_RUN_NOWAIT);
        if (activity_ != before || !ringsWorked) {
          uvTurnEvery = kUvTurnMin;
          quietUvTurns = 0;
        } else if (++quietUvTurns >= kQuietUvTurns) {
          uvTurnEvery = std::min(uvTurnEvery * 2, std::chrono::microseconds(kUvTurnMax));
        }
        ringsWorked = false;
      }
    }
    if (worked) {
      idleTurns = 0;
      continue;
    }
    ++idleTurns;
    auto window = std::chrono::microseconds(pollWindow_.load(std::memory_order_relaxed));
    if (window.count() > 0) {
      // Reading the clock costs too: look at it one idle turn in 16, and
      // only then stamp activity that happened since the last look (a
      // worked turn only raises a flag).
      if (idleTurns % 16 != 0) continue;
      if (now == std::chrono::steady_clock::time_point{}) now = std::chrono::steady_clock::now();
      if (active_) {
        active_ = false;
        lastActivity_ = now;
        continue;
      }
      if (now - lastActivity_ < window) continue;
    }
    sleeping_.store(true);
    bool empty;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      empty = queue_.empty() && local_.empty();
    }
    if (empty && prepareToSleep()) {
      uv_run(loop_, UV_RUN_ONCE);
      // Woken through epoll: a socket or timer has work again.
      uvTurnEvery = kUvTurnMin;
      quietUvTurns = 0;
    }
    awake();
    sleeping_.store(false);
    idleTurns = 0;
  }
  // Teardown has closed the users' handles; close ours and anything left, and
  // let libuv deliver the close callbacks.
  while (!timers_.empty()) cancel(timers_.begin()->first);
  uv_close(reinterpret_cast<uv_handle_t*>(async_), nullptr);
  uv_walk(
      loop_,
      [](uv_handle_t* handle, void*) {
        if (!uv_is_closing(handle)) {
          uv_close(handle, nullptr);
        }
      },
      nullptr);
  uv_run(loop_, UV_RUN_DEFAULT);
  // No thread is this loop's any more (see inLoop()).
  threadId_.store(std::thread::id(), std::memory_order_release);
}

void Loop::stop(Task teardown) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!stopping_.load(std::memory_order_relaxed) && !finished_) {
      if (teardown) {
        queue_.push_back(std::move(teardown));
        queued_.store(true, std::memory_order_release);
      }
      stopping_.store(true, std::memory_order_release);
    }
  }
  if (inLoop()) {
    return;  // the owner joins later, from another thread
  }
  uv_async_send(async_);
  if (!joined_.exchange(true)) {
    thread_.join();
  }
}

} // namespace actorpipe::detail
