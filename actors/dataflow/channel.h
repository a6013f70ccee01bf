#pragma once

// Closable FIFO channels (torch-ipc semantics) with optional capacity.
//
// A Channel<T> is a cheap, copyable handle to shared state, so channels can
// be captured, stored, and sent through other channels. Blocking calls are
// for plain threads; actors use read_then/write_then from actor_io.h, which
// park the request in the channel instead of blocking a scheduler thread.

#include <actorpipe/actors/dataflow/status.h>
#include <actorpipe/actors/dataflow/sync.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace actorpipe::dataflow {

namespace detail {

// A reader that waits without holding a thread (an actor's parked read).
template <class T>
class ReadWaiter {
public:
  virtual ~ReadWaiter() = default;
  // False once nobody can take the item any more (its actor is gone).
  virtual bool still_waiting() const = 0;
  // Called once, outside the channel lock, on the thread that satisfied it.
  virtual void resolve(ReadResult<T> result) = 0;
};

// A writer that waits for room without holding a thread.
template <class T>
class WriteWaiter {
public:
  virtual ~WriteWaiter() = default;
  virtual bool still_waiting() const = 0;
  virtual std::vector<T>& pending_items() = 0;
  virtual void resolve(Status status) = 0;
};

// What an operation found to do under the lock but must do after releasing
// it: kernel wake-ups and waiter callbacks never run in the critical section.
template <class T>
struct AfterUnlock {
  static constexpr int everyone = -1;
  int wake_readers = 0;
  int wake_writers = 0;
  std::vector<std::pair<std::shared_ptr<ReadWaiter<T>>, ReadResult<T>>> reads;
  std::vector<std::pair<std::shared_ptr<WriteWaiter<T>>, Status>> writes;
  std::vector<std::shared_ptr<Signal>> signals;
};

// Spins briefly before a thread goes to sleep: on these machines a sleeping
// thread costs ~40 us to wake, far more than the time a busy peer needs to
// produce or consume the next item.
template <class Ready>
bool spin_until(Ready&& ready) {
  for (int round = 0; round < 256; ++round) {
    if (ready())
      return true;
    if (round < 200)
      cpu_relax();
    else
      std::this_thread::yield();
  }
  return ready();
}

template <class T>
class ChannelState {
public:
  explicit ChannelState(std::size_t capacity) : capacity_(capacity) {}
  ChannelState(const ChannelState&) = delete;
  ChannelState& operator=(const ChannelState&) = delete;

  // Writes `count` items through `push` all at once, or nothing.
  template <class Push>
  Status write(std::size_t count, Push&& push,
               const Clock::time_point* deadline, bool blocking) {
    std::unique_lock<SpinLock> guard(lock_);
    bool spun = false;
    for (;;) {
      if (closed_)
        return items_.empty() ? Status::drained : Status::closed;
      if (fits(count))
        break;
      if (!blocking)
        return Status::full;
      if (!spun) {
        spun = true;
        guard.unlock();
        spin_until([&] { return room_hint(count) || closed_hint_.load(); });
        guard.lock();
        continue;
      }
      ++sleeping_writers_;
      if (count > 1)
        ++sleeping_batch_writers_;
      bool timed_out = false;
      if (deadline)
        timed_out = writable_.wait_until(guard, *deadline) == std::cv_status::timeout;
      else
        writable_.wait(guard);
      --sleeping_writers_;
      if (count > 1)
        --sleeping_batch_writers_;
      if (timed_out && !closed_ && !fits(count))
        return Status::full;
    }
    push(items_);
    AfterUnlock<T> after;
    items_added(after);
    guard.unlock();
    finish(after);
    return Status::open;
  }

  ReadResult<T> read(const Clock::time_point* deadline, bool blocking) {
    std::unique_lock<SpinLock> guard(lock_);
    bool spun = false;
    for (;;) {
      if (!items_.empty())
        return take(guard);
      if (closed_)
        return ReadResult<T>(Status::drained);
      if (!blocking)
        return ReadResult<T>(Status::empty);
      if (!spun) {
        spun = true;
        guard.unlock();
        spin_until([&] {
          return size_hint_.load(std::memory_order_relaxed) > 0
                 || closed_hint_.load(std::memory_order_relaxed);
        });
        guard.lock();
        continue;
      }
      ++sleeping_readers_;
      bool timed_out = false;
      if (deadline)
        timed_out = readable_.wait_until(guard, *deadline) == std::cv_status::timeout;
      else
        readable_.wait(guard);
      --sleeping_readers_;
      if (timed_out && items_.empty() && !closed_)
        return ReadResult<T>(Status::empty);
    }
  }

  // Takes an item if there is one (or reports DRAINED); otherwise keeps the
  // waiter, to be resolved by a later write or close.
  std::optional<ReadResult<T>>
  read_or_park(std::shared_ptr<ReadWaiter<T>> waiter) {
    std::unique_lock<SpinLock> guard(lock_);
    if (!items_.empty())
      return take(guard);
    if (closed_)
      return ReadResult<T>(Status::drained);
    forget_departed(parked_readers_);
    parked_readers_.push_back(std::move(waiter));
    return std::nullopt;
  }

  // Writes the waiter's items if they fit now; otherwise keeps the waiter
  // until a read makes room or the channel closes.
  std::optional<Status> write_or_park(std::shared_ptr<WriteWaiter<T>> waiter) {
    std::unique_lock<SpinLock> guard(lock_);
    if (closed_)
      return items_.empty() ? Status::drained : Status::closed;
    auto& pending = waiter->pending_items();
    if (!fits(pending.size())) {
      forget_departed(parked_writers_);
      parked_writers_.push_back(std::move(waiter));
      return std::nullopt;
    }
    for (auto& item : pending)
      items_.push_back(std::move(item));
    pending.clear();
    AfterUnlock<T> after;
    items_added(after);
    guard.unlock();
    finish(after);
    return Status::open;
  }

  // Gives back an item that was taken for a reader that vanished before it
  // could see it, so that the item still reaches exactly one reader.
  void unread(T item) {
    std::unique_lock<SpinLock> guard(lock_);
    items_.push_front(std::move(item));
    AfterUnlock<T> after;
    items_added(after);
    guard.unlock();
    finish(after);
  }

  void close() {
    std::unique_lock<SpinLock> guard(lock_);
    if (closed_)
      return;
    closed_ = true;
    closed_hint_.store(true);
    AfterUnlock<T> after;
    // Parked readers only exist while the channel is empty.
    for (auto& waiter : parked_readers_)
      if (waiter->still_waiting())
        after.reads.emplace_back(std::move(waiter), ReadResult<T>(Status::drained));
    parked_readers_.clear();
    auto refused = items_.empty() ? Status::drained : Status::closed;
    for (auto& waiter : parked_writers_)
      after.writes.emplace_back(std::move(waiter), refused);
    parked_writers_.clear();
    if (sleeping_readers_ > 0)
      after.wake_readers = AfterUnlock<T>::everyone;
    if (sleeping_writers_ > 0)
      after.wake_writers = AfterUnlock<T>::everyone;
    after.signals = watchers_;
    guard.unlock();
    finish(after);
  }

  Status status() const {
    std::lock_guard<SpinLock> guard(lock_);
    if (!closed_)
      return Status::open;
    return items_.empty() ? Status::drained : Status::closed;
  }

  std::size_t size() const {
    std::lock_guard<SpinLock> guard(lock_);
    return items_.size();
  }

  std::size_t capacity() const { return capacity_; }

  // For select: remembers `signal` to raise on every write and on close.
  // Returns true if an item is already waiting.
  bool watch(const std::shared_ptr<Signal>& signal) {
    std::lock_guard<SpinLock> guard(lock_);
    watchers_.push_back(signal);
    return !items_.empty();
  }

  void unwatch(const std::shared_ptr<Signal>& signal) {
    std::lock_guard<SpinLock> guard(lock_);
    watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), signal),
                    watchers_.end());
  }

private:
  bool fits(std::size_t count) const {
    // A batch larger than the capacity may enter an empty channel; otherwise
    // it could never be written at all.
    return capacity_ == 0 || items_.empty() || items_.size() + count <= capacity_;
  }

  bool room_hint(std::size_t count) const {
    auto size = size_hint_.load(std::memory_order_relaxed);
    return capacity_ == 0 || size == 0 || size + count <= capacity_;
  }

  template <class Waiters>
  static void forget_departed(Waiters& waiters) {
    if (waiters.size() < 16)
      return;
    waiters.erase(std::remove_if(waiters.begin(), waiters.end(),
                                 [](auto& w) { return !w->still_waiting(); }),
                  waiters.end());
  }

  ReadResult<T> take(std::unique_lock<SpinLock>& guard) {
    ReadResult<T> result(closed_ ? Status::closed : Status::open,
                         std::move(items_.front()));
    items_.pop_front();
    AfterUnlock<T> after;
    items_removed(after);
    guard.unlock();
    finish(after);
    return result;
  }

  void items_added(AfterUnlock<T>& after) {
    auto handed_status = closed_ ? Status::closed : Status::open;
    while (!items_.empty() && !parked_readers_.empty()) {
      auto waiter = std::move(parked_readers_.front());
      parked_readers_.pop_front();
      if (!waiter->still_waiting())
        continue;
      after.reads.emplace_back(std::move(waiter),
                               ReadResult<T>(handed_status, std::move(items_.front())));
      items_.pop_front();
    }
    size_hint_.store(items_.size(), std::memory_order_relaxed);
    if (items_.empty())
      return;
    if (sleeping_readers_ > 0)
      after.wake_readers = static_cast<int>(
        std::min<std::size_t>(items_.size(), sleeping_readers_));
    if (!watchers_.empty())
      after.signals = watchers_;
  }

  void items_removed(AfterUnlock<T>& after) {
    bool admitted = false;
    while (!parked_writers_.empty()) {
      auto& waiter = parked_writers_.front();
      if (!waiter->still_waiting()) {
        parked_writers_.pop_front();
        continue;
      }
      auto& pending = waiter->pending_items();
      if (!fits(pending.size()))
        break;
      for (auto& item : pending)
        items_.push_back(std::move(item));
      pending.clear();
      after.writes.emplace_back(std::move(waiter), Status::open);
      parked_writers_.pop_front();
      admitted = true;
    }
    if (admitted) {
      items_added(after);
      return;
    }
    size_hint_.store(items_.size(), std::memory_order_relaxed);
    if (sleeping_writers_ > 0 && fits(1))
      // A batch writer may need more room than one slot; waking only one
      // writer could pick it and leave a single-item writer asleep.
      after.wake_writers = sleeping_batch_writers_ > 0 ? AfterUnlock<T>::everyone : 1;
  }

  void finish(AfterUnlock<T>& after) {
    wake(readable_, after.wake_readers);
    wake(writable_, after.wake_writers);
    for (auto& [waiter, result] : after.reads)
      waiter->resolve(std::move(result));
    for (auto& [waiter, status] : after.writes)
      waiter->resolve(status);
    for (auto& signal : after.signals)
      signal->raise();
  }

  static void wake(std::condition_variable_any& cv, int how_many) {
    if (how_many == AfterUnlock<T>::everyone)
      cv.notify_all();
    else
      for (int i = 0; i < how_many; ++i)
        cv.notify_one();
  }

  mutable SpinLock lock_;
  std::condition_variable_any readable_;
  std::condition_variable_any writable_;
  std::deque<T> items_;
  const std::size_t capacity_;
  bool closed_ = false;
  // Read without the lock by spinning threads; exact values live in items_.
  std::atomic<std::size_t> size_hint_{0};
  std::atomic<bool> closed_hint_{false};
  std::size_t sleeping_readers_ = 0;
  std::size_t sleeping_writers_ = 0;
  std::size_t sleeping_batch_writers_ = 0;
  std::deque<std::shared_ptr<ReadWaiter<T>>> parked_readers_;
  std::deque<std::shared_ptr<WriteWaiter<T>>> parked_writers_;
  std::vector<std::shared_ptr<Signal>> watchers_;
};

} // namespace detail

// Operations are const: a Channel is a handle, like a shared_ptr, and
// const-ness of the handle says nothing about the shared queue.
template <class T>
class Channel {
public:
  using value_type = T;

  // capacity 0 means unbounded. With a capacity, writers wait for room.
  explicit Channel(std::size_t capacity = 0)
    : state_(std::make_shared<detail::ChannelState<T>>(capacity)) {
  }

  // Enqueues all items as one contiguous batch, waiting for room if the
  // channel is bounded. Returns OPEN, or CLOSED/DRAINED with nothing written.
  template <class... Us>
  Status write(Us&&... items) const {
    return write_impl(nullptr, true, std::forward<Us>(items)...);
  }

  // Like write, but returns FULL instead of waiting for room.
  template <class... Us>
  Status try_write(Us&&... items) const {
    return write_impl(nullptr, false, std::forward<Us>(items)...);
  }

  // Like write, but returns FULL if no room came within `timeout`.
  template <class Rep, class Period, class... Us>
  Status write_for(std::chrono::duration<Rep, Period> timeout, Us&&... items) const {
    auto deadline = detail::Clock::now() + timeout;
    return write_impl(&deadline, true, std::forward<Us>(items)...);
  }

  // Writes a whole vector as one atomic batch.
  Status write_all(std::vector<T> items) const {
    auto count = items.size();
    return state_->write(
      count,
      [&](std::deque<T>& queue) {
        for (auto& item : items)
          queue.push_back(std::move(item));
      },
      nullptr, true);
  }

  // Waits for an item. Returns (OPEN, item), (CLOSED, item) while a closed
  // channel still holds items, then (DRAINED, nothing).
  ReadResult<T> read() const { return state_->read(nullptr, true); }

  // Never waits: (EMPTY, nothing) if the channel is open but empty.
  ReadResult<T> try_read() const { return state_->read(nullptr, false); }

  // Waits at most `timeout`: (EMPTY, nothing) on timeout.
  template <class Rep, class Period>
  ReadResult<T> read_for(std::chrono::duration<Rep, Period> timeout) const {
    auto deadline = detail::Clock::now() + timeout;
    return state_->read(&deadline, true);
  }

  // Idempotent. Refuses further writes and wakes every waiting reader and
  // writer; readers still get the remaining items.
  void close() const { state_->close(); }

  Status status() const { return state_->status(); }
  bool is_closed() const { return state_->status() != Status::open; }
  std::size_t size() const { return state_->size(); }
  std::size_t capacity() const { return state_->capacity(); }

  const std::shared_ptr<detail::ChannelState<T>>& state() const { return state_; }

  friend bool operator==(const Channel& a, const Channel& b) {
    return a.state_ == b.state_;
  }
  friend bool operator!=(const Channel& a, const Channel& b) { return !(a == b); }

private:
  template <class... Us>
  Status write_impl(const detail::Clock::time_point* deadline, bool blocking,
                    Us&&... items) const {
    static_assert(sizeof...(Us) > 0, "write needs at least one item");
    // Items are only moved from if the write happens, so a refused write
    // leaves the caller's values intact.
    return state_->write(
      sizeof...(Us),
      [&](std::deque<T>& queue) { (queue.emplace_back(std::forward<Us>(items)), ...); },
      deadline, blocking);
  }

  std::shared_ptr<detail::ChannelState<T>> state_;
};

} // namespace actorpipe::dataflow
