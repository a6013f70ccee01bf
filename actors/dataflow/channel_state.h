#pragma once

// Shared state behind a Channel<T>.
//
// Items live in a power-of-two ring indexed by two ever-growing counters,
// head (next to read) and tail (next to write). Writers serialise on one
// spin lock and readers on another, each on its own cache line, and each
// side keeps a private, possibly stale copy of the other side's counter. A
// producer and a consumer therefore only share the cache lines of the
// items themselves (eight 8-byte items per line) instead of bouncing a lock
// and a node per item: that is what makes one-producer/one-consumer fast.
// Multiple writers or readers simply contend for their side's lock.
//
// Everything that waits (sleeping threads, parked actor requests, select
// watchers) goes through the "waiting room": a mutex, two condition
// variables and the parked lists. Fast paths only look at a counter of
// waiters, read inside their side lock: a writer reads `waitingReaders_`
// under the writer lock, and whoever waits for items registers there under
// that same lock before re-checking the ring (likewise for readers and
// `waitingWriters_` under the reader lock). The lock orders the two, so
// either the writer sees the waiter or the waiter sees the item: no wake-up
// is lost, and the fast path needs no fence beyond the lock itself.
//
// Lock order: waiting room, then writer lock, then reader lock.

#include <actorpipe/actors/dataflow/status.h>
#include <actorpipe/actors/dataflow/sync.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <utility>
#include <vector>

namespace actorpipe::dataflow::detail {

// A reader that waits without holding a thread (an actor's parked read).
template <class T>
class ReadWaiter {
public:
  virtual ~ReadWaiter() = default;
  // False once nobody can take the item any more (its actor is gone).
  virtual bool stillWaiting() const = 0;
  // Called once, outside every channel lock.
  virtual void resolve(ReadResult<T> result) = 0;
};

// A writer that waits for room without holding a thread.
template <class T>
class WriteWaiter {
public:
  virtual ~WriteWaiter() = default;
  virtual bool stillWaiting() const = 0;
  virtual std::vector<T>& pendingItems() = 0;
  virtual void resolve(Status status) = 0;
};

// Callbacks found under the waiting-room lock, run after releasing it.
template <class T>
struct AfterUnlock {
  std::vector<std::pair<std::shared_ptr<ReadWaiter<T>>, ReadResult<T>>> reads;
  std::vector<std::pair<std::shared_ptr<WriteWaiter<T>>, Status>> writes;
  std::vector<std::shared_ptr<Signal>> signals;

  void run() {
    for (auto& [waiter, result] : reads)
      waiter->resolve(std::move(result));
    for (auto& [waiter, status] : writes)
      waiter->resolve(status);
    for (auto& signal : signals)
      signal->raise();
  }
};

// Spins briefly before a thread goes to sleep: on these machines a sleeping
// thread costs ~40 us to wake, far more than a busy peer needs to produce or
// consume the next item.
template <class Ready>
bool spinUntil(Ready&& ready) {
  for (int round = 0; round < 256; ++round) {
    if (ready())
      return true;
    if (round < 64)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  return ready();
}

template <class T>
class ChannelState {
public:
  explicit ChannelState(std::size_t capacity) : capacity_(capacity) {
    std::size_t ring = 16;
    while (ring < capacity)
      ring *= 2;
    slots_ = allocate(ring);
    mask_ = ring - 1;
  }

  ChannelState(const ChannelState&) = delete;
  ChannelState& operator=(const ChannelState&) = delete;

  ~ChannelState() {
    for (auto i = head_.load(); i != tail_.load(); ++i)
      slot(i)->~T();
    ::operator delete(slots_);
  }

  // Appends items in ring slots; handed to the `push` of write().
  class Appender {
  public:
    template <class... Args>
    void emplace_back(Args&&... args) {
      new (state_.slot(next_)) T(std::forward<Args>(args)...);
      ++next_;
    }
    void push_back(T item) { emplace_back(std::move(item)); }

  private:
    friend class ChannelState;
    Appender(ChannelState& state, std::size_t first) : state_(state), next_(first) {}
    ChannelState& state_;
    std::size_t next_;
  };

  // Writes `count` items through `push(Appender&)` all at once, or nothing.
  template <class Push>
  Status write(std::size_t count, Push&& push, const Clock::time_point* deadline,
               bool blocking) {
    bool spun = false;
    for (;;) {
      auto outcome = tryAppend(count, push);
      if (outcome != Status::kFull || !blocking)
        return outcome;
      if (!spun) {
        spun = true;
        // Waiting for a little more room than needed lets the readers get a
        // few slots ahead, so the two sides stop sharing the same cache
        // line item after item.
        auto extra = std::min<std::size_t>(capacity_ / 4, 8);
        int rounds = 0;
        spinUntil([&] {
          return closedFlag_.load() || roomFor(count + (++rounds > 16 ? 0 : extra));
        });
        continue;
      }
      std::unique_lock<std::mutex> room(room_);
      ++sleepingWriters_;
      if (count > 1)
        ++sleepingBatchWriters_;
      registerWaitingWriter();
      bool timed_out = false;
      if (!closedFlag_.load() && !roomFor(count)) {
        if (deadline)
          timed_out = writable_.wait_until(room, *deadline) == std::cv_status::timeout;
        else
          writable_.wait(room);
      }
      waitingWriters_.fetch_sub(1);
      --sleepingWriters_;
      if (count > 1)
        --sleepingBatchWriters_;
      room.unlock();
      if (timed_out) {
        auto lastTry = tryAppend(count, push);
        return lastTry;
      }
    }
  }

  ReadResult<T> read(const Clock::time_point* deadline, bool blocking) {
    bool spun = false;
    for (;;) {
      auto result = tryTake();
      if (result.status != Status::kEmpty || !blocking)
        return result;
      if (!spun) {
        spun = true;
        // Likewise, a reader that found the channel empty waits briefly for
        // a few items rather than chasing the writer one item at a time.
        int rounds = 0;
        spinUntil([&] {
          return closedFlag_.load() || size() >= 8 || (++rounds > 16 && !isEmpty());
        });
        continue;
      }
      std::unique_lock<std::mutex> room(room_);
      ++sleepingReaders_;
      registerWaitingReader();
      bool timed_out = false;
      if (!readableHint()) {
        if (deadline)
          timed_out = readable_.wait_until(room, *deadline) == std::cv_status::timeout;
        else
          readable_.wait(room);
      }
      waitingReaders_.fetch_sub(1);
      --sleepingReaders_;
      room.unlock();
      if (timed_out)
        return tryTake();
    }
  }

  // Takes an item if there is one (or reports DRAINED); otherwise keeps the
  // waiter, to be resolved by a later write or close.
  std::optional<ReadResult<T>> readOrPark(std::shared_ptr<ReadWaiter<T>> waiter) {
    std::unique_lock<std::mutex> room(room_);
    registerWaitingReader();
    auto now = tryTakeQuietly();
    if (now.status != Status::kEmpty) {
      waitingReaders_.fetch_sub(1);
      AfterUnlock<T> after;
      afterTakeLocked(after);
      room.unlock();
      after.run();
      return now;
    }
    forgetDeparted(parkedReaders_, waitingReaders_, readersPruneAt_);
    parkedReaders_.push_back(std::move(waiter));
    return std::nullopt;
  }

  // Lets go at once of parked waiters that stopped waiting (their actor
  // ended, or what they were wanted for went), for whoever bounds what is
  // parked: a remote channel's owner. O(parked).
  void forgetDepartedWaiters() {
    std::unique_lock<std::mutex> room(room_);
    removeDeparted(parkedReaders_, waitingReaders_);
    removeDeparted(parkedWriters_, waitingWriters_);
  }

  // Writes the waiter's items if they fit now; otherwise keeps the waiter
  // until a read makes room or the channel closes.
  std::optional<Status> writeOrPark(std::shared_ptr<WriteWaiter<T>> waiter) {
    std::unique_lock<std::mutex> room(room_);
    registerWaitingWriter();
    auto& pending = waiter->pendingItems();
    auto outcome = tryAppendQuietly(pending.size(), [&](Appender& out) {
      for (auto& item : pending)
        out.emplace_back(std::move(item));
    });
    if (outcome == Status::kFull) {
      forgetDeparted(parkedWriters_, waitingWriters_, writersPruneAt_);
      parkedWriters_.push_back(std::move(waiter));
      return std::nullopt;
    }
    waitingWriters_.fetch_sub(1);
    pending.clear();
    AfterUnlock<T> after;
    if (outcome == Status::kOpen)
      afterAppendLocked(after);
    room.unlock();
    after.run();
    return outcome;
  }

  // Gives back, at the front, an item that was taken for a reader that
  // vanished before seeing it, so it still reaches exactly one reader.
  void unread(T item) {
    std::unique_lock<std::mutex> room(room_);
    {
      std::lock_guard<SpinLock> writers(writeLock_);
      std::lock_guard<SpinLock> readers(readLock_);
      auto head = head_.load();
      auto tail = tail_.load();
      if (tail - head > mask_)
        growLocked(tail - head + 1);
      new (slot(head - 1)) T(std::move(item));
      head_.store(head - 1);
      knownHead_ = head - 1;
    }
    AfterUnlock<T> after;
    afterAppendLocked(after);
    room.unlock();
    after.run();
  }

  void close() {
    std::unique_lock<std::mutex> room(room_);
    {
      std::lock_guard<SpinLock> writers(writeLock_);
      if (closed_)
        return;
      closed_ = true;
      closedFlag_.store(true);
    }
    AfterUnlock<T> after;
    serveParkedReadersLocked(after);
    auto refused = isEmpty() ? Status::kDrained : Status::kClosed;
    for (auto& waiter : parkedWriters_) {
      after.writes.emplace_back(std::move(waiter), refused);
      waitingWriters_.fetch_sub(1);
    }
    parkedWriters_.clear();
    readable_.notify_all();
    writable_.notify_all();
    after.signals = watchers_;
    room.unlock();
    after.run();
  }

  Status status() const {
    if (!closedFlag_.load())
      return Status::kOpen;
    return isEmpty() ? Status::kDrained : Status::kClosed;
  }

  std::size_t size() const {
    // Head first: tail only grows, so the difference never goes negative.
    auto head = head_.load();
    return tail_.load() - head;
  }

  std::size_t capacity() const { return capacity_; }

  // For select: `signal` is raised on every write and on close. Returns true
  // if an item is already waiting.
  bool watch(const std::shared_ptr<Signal>& signal) {
    std::lock_guard<std::mutex> room(room_);
    watchers_.push_back(signal);
    registerWaitingReader();
    return !isEmpty();
  }

  void unwatch(const std::shared_ptr<Signal>& signal) {
    std::lock_guard<std::mutex> room(room_);
    auto it = std::find(watchers_.begin(), watchers_.end(), signal);
    if (it != watchers_.end()) {
      watchers_.erase(it);
      waitingReaders_.fetch_sub(1);
    }
  }

private:
  static T* allocate(std::size_t slots) {
    return static_cast<T*>(::operator new(slots * sizeof(T)));
  }

  T* slot(std::size_t index) const { return slots_ + (index & mask_); }

  bool isEmpty() const { return head_.load() == tail_.load(); }

  bool readableHint() const { return !isEmpty() || closedFlag_.load(); }

  bool fits(std::size_t size, std::size_t count) const {
    // A batch larger than the capacity may enter an empty channel; otherwise
    // it could never be written at all.
    return capacity_ == 0 || size == 0 || size + count <= capacity_;
  }

  bool roomFor(std::size_t count) const { return fits(size(), count); }

  // -- writer side ------------------------------------------------------------

  template <class Push>
  Status tryAppend(std::size_t count, Push& push) {
    bool readersWaiting = false;
    auto outcome = tryAppendQuietly(count, push, &readersWaiting);
    if (outcome == Status::kOpen && readersWaiting) {
      std::unique_lock<std::mutex> room(room_);
      AfterUnlock<T> after;
      afterAppendLocked(after);
      room.unlock();
      after.run();
    }
    return outcome;
  }

  // Appends without looking at waiters.
  template <class Push>
  Status tryAppendQuietly(std::size_t count, Push&& push,
                            bool* readersWaiting = nullptr) {
    std::lock_guard<SpinLock> writers(writeLock_);
    auto tail = tail_.load(std::memory_order_relaxed);
    if (closed_) {
      knownHead_ = head_.load(std::memory_order_acquire);
      return tail == knownHead_ ? Status::kDrained : Status::kClosed;
    }
    if (!fits(tail - knownHead_, count)) {
      knownHead_ = head_.load();
      if (!fits(tail - knownHead_, count))
        return Status::kFull;
    }
    if (tail + count - knownHead_ > mask_ + 1) {
      knownHead_ = head_.load(std::memory_order_acquire);
      if (tail + count - knownHead_ > mask_ + 1) {
        std::lock_guard<SpinLock> readers(readLock_);
        knownHead_ = head_.load(std::memory_order_acquire);
        growLocked(tail + count - knownHead_);
      }
    }
    Appender out(*this, tail);
    push(out);
    tail_.store(tail + count, std::memory_order_release);
    if (readersWaiting)
      *readersWaiting = waitingReaders_.load(std::memory_order_relaxed) > 0;
    return Status::kOpen;
  }

  // Needs both side locks. Keeps absolute indices, re-homing each item.
  void growLocked(std::size_t needed) {
    auto ring = mask_ + 1;
    while (ring < needed)
      ring *= 2;
    if (ring == mask_ + 1)
      return;
    auto* fresh = allocate(ring);
    auto newMask = ring - 1;
    for (auto i = head_.load(std::memory_order_relaxed), end = tail_.load(std::memory_order_relaxed);
         i != end; ++i) {
      new (fresh + (i & newMask)) T(std::move(*slot(i)));
      slot(i)->~T();
    }
    ::operator delete(slots_);
    slots_ = fresh;
    mask_ = newMask;
  }

  // -- reader side ------------------------------------------------------------

  ReadResult<T> tryTake() {
    bool writersWaiting = false;
    auto result = tryTakeQuietly(&writersWaiting);
    if (result.hasItem() && writersWaiting) {
      std::unique_lock<std::mutex> room(room_);
      AfterUnlock<T> after;
      afterTakeLocked(after);
      room.unlock();
      after.run();
    }
    return result;
  }

  // Takes without looking at waiters: (OPEN|CLOSED, item), DRAINED or EMPTY.
  ReadResult<T> tryTakeQuietly(bool* writersWaiting = nullptr) {
    std::lock_guard<SpinLock> readers(readLock_);
    auto head = head_.load(std::memory_order_relaxed);
    if (head == knownTail_) {
      knownTail_ = tail_.load();
      if (head == knownTail_) {
        if (!closedFlag_.load())
          return ReadResult<T>(Status::kEmpty);
        // Close happens after the last write, so this tail is final.
        knownTail_ = tail_.load(std::memory_order_acquire);
        if (head == knownTail_)
          return ReadResult<T>(Status::kDrained);
      }
    }
    auto status = closedFlag_.load(std::memory_order_acquire) ? Status::kClosed : Status::kOpen;
    ReadResult<T> result(status, std::move(*slot(head)));
    slot(head)->~T();
    head_.store(head + 1, std::memory_order_release);
    if (writersWaiting)
      *writersWaiting = waitingWriters_.load(std::memory_order_relaxed) > 0;
    return result;
  }

  // -- waiting room (callers hold room_) --------------------------------------

  // Hands available items to parked readers; once the channel is drained,
  // tells the remaining ones.
  void serveParkedReadersLocked(AfterUnlock<T>& after) {
    while (!parkedReaders_.empty()) {
      auto& waiter = parkedReaders_.front();
      if (!waiter->stillWaiting()) {
        parkedReaders_.pop_front();
        waitingReaders_.fetch_sub(1);
        continue;
      }
      auto now = tryTakeQuietly();
      if (now.status == Status::kEmpty)
        return;
      after.reads.emplace_back(std::move(waiter), std::move(now));
      parkedReaders_.pop_front();
      waitingReaders_.fetch_sub(1);
    }
  }

  void afterAppendLocked(AfterUnlock<T>& after) {
    serveParkedReadersLocked(after);
    if (sleepingReaders_ > 0 && !isEmpty())
      readable_.notify_all();
    if (!watchers_.empty())
      after.signals = watchers_;
  }

  void afterTakeLocked(AfterUnlock<T>& after) {
    bool admitted = false;
    while (!parkedWriters_.empty()) {
      auto& waiter = parkedWriters_.front();
      if (!waiter->stillWaiting()) {
        parkedWriters_.pop_front();
        waitingWriters_.fetch_sub(1);
        continue;
      }
      auto& pending = waiter->pendingItems();
      auto outcome = tryAppendQuietly(pending.size(), [&](Appender& out) {
        for (auto& item : pending)
          out.emplace_back(std::move(item));
      });
      if (outcome == Status::kFull)
        break;
      pending.clear();
      after.writes.emplace_back(std::move(waiter), outcome);
      parkedWriters_.pop_front();
      waitingWriters_.fetch_sub(1);
      admitted = admitted || outcome == Status::kOpen;
    }
    if (admitted)
      afterAppendLocked(after);
    if (sleepingWriters_ > 0) {
      // A batch writer may need more than one free slot; waking only one
      // writer could pick it and leave a single-item writer asleep.
      if (sleepingBatchWriters_ > 0)
        writable_.notify_all();
      else
        writable_.notify_one();
    }
  }

  // Waiters that stopped waiting leave when they reach the front, or here:
  // once the queue has doubled since the last walk, so that parking stays
  // O(1) amortized however many wait (each walk is O(n)).
  template <class Waiters>
  static void forgetDeparted(Waiters& waiters, std::atomic<int>& counter, std::size_t& pruneAt) {
    if (waiters.size() < pruneAt) {
      // Served from the front since: walk again sooner.
      if (waiters.size() * 4 < pruneAt)
        pruneAt = std::max<std::size_t>(16, 2 * waiters.size());
      return;
    }
    removeDeparted(waiters, counter);
    pruneAt = std::max<std::size_t>(16, 2 * waiters.size());
  }

  template <class Waiters>
  static void removeDeparted(Waiters& waiters, std::atomic<int>& counter) {
    auto before = waiters.size();
    waiters.erase(std::remove_if(waiters.begin(), waiters.end(),
                                 [](auto& w) { return !w->stillWaiting(); }),
                  waiters.end());
    counter.fetch_sub(static_cast<int>(before - waiters.size()));
  }

  // Registration happens under the side lock whose fast path reads the
  // counter; see the comment at the top of this file.
  void registerWaitingReader() {
    std::lock_guard<SpinLock> writers(writeLock_);
    waitingReaders_.fetch_add(1);
  }

  void registerWaitingWriter() {
    std::lock_guard<SpinLock> readers(readLock_);
    waitingWriters_.fetch_add(1);
  }

  // Writer side: its lock and its view of the reader side.
  alignas(64) SpinLock writeLock_;
  std::size_t knownHead_ = 0;
  bool closed_ = false;

  // Reader side: its lock and its view of the writer side.
  alignas(64) SpinLock readLock_;
  std::size_t knownTail_ = 0;

  alignas(64) std::atomic<std::size_t> tail_{0};
  alignas(64) std::atomic<std::size_t> head_{0};

  // Read by both sides on every operation, written rarely.
  alignas(64) std::atomic<bool> closedFlag_{false};
  // Sleeping readers, parked readers and select watchers: a write must
  // visit the waiting room while there are any.
  std::atomic<int> waitingReaders_{0};
  // Sleeping and parked writers: a read must visit the waiting room.
  std::atomic<int> waitingWriters_{0};
  T* slots_ = nullptr;
  std::size_t mask_ = 0;
  const std::size_t capacity_;

  // The waiting room.
  alignas(64) std::mutex room_;
  std::condition_variable readable_;
  std::condition_variable writable_;
  std::size_t sleepingReaders_ = 0;
  std::size_t sleepingWriters_ = 0;
  std::size_t sleepingBatchWriters_ = 0;
  std::deque<std::shared_ptr<ReadWaiter<T>>> parkedReaders_;
  std::deque<std::shared_ptr<WriteWaiter<T>>> parkedWriters_;
  std::size_t readersPruneAt_ = 16;
  std::size_t writersPruneAt_ = 16;
  std::vector<std::shared_ptr<Signal>> watchers_;
};

} // namespace actorpipe::dataflow::detail
