#pragma once

// Channels from inside actors, without blocking a scheduler thread.
//
// readThen(self, channel, fn) calls fn(ReadResult) once an item (or
// DRAINED) is available. If the channel can answer at once, fn runs right
// away on the actor's own stack (through a small trampoline, so loops that
// re-arm from inside fn keep a flat stack and yield to the mailbox after a
// budget). Otherwise the read is parked inside the channel; the writer or
// closer that satisfies it later posts fn into the actor's mailbox, and it
// runs in the actor's context like any message handler.
//
// A parked request holds only a weak reference to the actor, so parking
// never keeps an actor alive or delays actor_system shutdown. An item handed
// to an actor that dies before seeing it goes back to the front of the
// channel, so it still reaches exactly one reader.
//
// Delivery uses the actor's default handler (messages no behavior matched).
// The first read or write wraps the handler the actor has then: its own, if
// it set one, still gets every other message. One it sets afterwards
// replaces the wrapper and the deliveries with it, so set it first (and do
// not make the first read or write from inside it: CAF holds it apart
// while it runs, out of the wrapper's reach). In
// place of CAF's print_and_drop, unexpected messages are logged (at warn)
// in a bounded number of lines: the first 8, then the 16th, 32nd, ...

#include <actorpipe/actors/dataflow/channel.h>
#include <actorpipe/actors/dataflow/workqueue.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace caf {
class scheduled_actor;
} // namespace caf

namespace actorpipe::dataflow {

namespace detail {

// A piece of an actor's work waiting to run in that actor's context.
class ActorContinuation {
public:
  virtual ~ActorContinuation() = default;
  virtual void run() = 0;
};

using ContinuationPtr = std::shared_ptr<ActorContinuation>;

// Makes `self`'s default handler the one that runs posted work (above).
// Idempotent. Also for actors that serve peers before they ever park, so
// that a peer's unexpected messages are reported bounded from the start.
void installDeliveryHandler(caf::scheduled_actor* self);

// Runs `work` now if `self` is the actor currently running on this thread
// and it has inline budget left, else posts it to the actor's mailbox.
void runInActor(caf::scheduled_actor* self, ContinuationPtr work);

// Runs `work` in `self`'s context after `delay` (a message to itself, so
// the actor handles others meanwhile); dropped if the actor ends first.
// Call from inside `self`.
void runInActorAfter(caf::scheduled_actor* self, std::chrono::milliseconds delay, ContinuationPtr work);

// A continuation that calls a function.
class FunctionContinuation final : public ActorContinuation {
public:
  explicit FunctionContinuation(std::function<void()> fn) : fn_(std::move(fn)) {}
  void run() override { fn_(); }

private:
  std::function<void()> fn_;
};

// A weak handle on an actor that can post work to it from any thread.
class ActorResumer {
public:
  explicit ActorResumer(caf::scheduled_actor* self);
  bool alive() const;
  // Drops `work` (running its destructor) if the actor is gone.
  void post(ContinuationPtr work) const;

private:
  struct Handle;
  std::shared_ptr<const Handle> handle_;
};

template <class T>
class ReadContinuation final : public ActorContinuation {
public:
  ReadContinuation(std::shared_ptr<ChannelState<T>> channel, ReadResult<T> result,
                   std::function<void(ReadResult<T>)> callback)
    : channel_(std::move(channel)), result_(std::move(result)),
      callback_(std::move(callback)) {
  }

  ~ReadContinuation() override {
    // Never ran: the actor is gone, so the item goes back for someone else.
    if (result_.item)
      channel_->unread(std::move(*result_.item));
  }

  void run() override {
    auto delivered = std::move(result_);
    result_.item.reset();
    callback_(std::move(delivered));
  }

private:
  std::shared_ptr<ChannelState<T>> channel_;
  ReadResult<T> result_;
  std::function<void(ReadResult<T>)> callback_;
};

template <class T>
class ActorReadWaiter final : public ReadWaiter<T> {
public:
  ActorReadWaiter(caf::scheduled_actor* self, std::weak_ptr<ChannelState<T>> channel,
                  std::function<void(ReadResult<T>)> callback,
                  std::shared_ptr<const std::atomic<bool>> wanted = nullptr)
    : actor_(self), channel_(std::move(channel)), callback_(std::move(callback)),
      wanted_(std::move(wanted)) {
  }

  bool stillWaiting() const override {
    return actor_.alive() && (!wanted_ || wanted_->load(std::memory_order_acquire));
  }

  void resolve(ReadResult<T> result) override {
    // The channel resolving us is alive, so the lock succeeds.
    actor_.post(std::make_shared<ReadContinuation<T>>(
      channel_.lock(), std::move(result), std::move(callback_)));
  }

  std::function<void(ReadResult<T>)> takeCallback() { return std::move(callback_); }

private:
  ActorResumer actor_;
  // Weak: the channel owns this waiter, a strong pointer back would leak both.
  std::weak_ptr<ChannelState<T>> channel_;
  std::function<void(ReadResult<T>)> callback_;
  std::shared_ptr<const std::atomic<bool>> wanted_;  // null: while the actor lives
};

class WriteContinuation final : public ActorContinuation {
public:
  WriteContinuation(Status status, std::function<void(Status)> callback)
    : status_(status), callback_(std::move(callback)) {
  }
  void run() override { callback_(status_); }

private:
  Status status_;
  std::function<void(Status)> callback_;
};

template <class T>
class ActorWriteWaiter final : public WriteWaiter<T> {
public:
  ActorWriteWaiter(caf::scheduled_actor* self, std::vector<T> items,
                   std::function<void(Status)> callback,
                   std::shared_ptr<const std::atomic<bool>> wanted = nullptr)
    : actor_(self), items_(std::move(items)), callback_(std::move(callback)),
      wanted_(std::move(wanted)) {
  }

  bool stillWaiting() const override {
    return actor_.alive() && (!wanted_ || wanted_->load(std::memory_order_acquire));
  }
  std::vector<T>& pendingItems() override { return items_; }

  void resolve(Status status) override {
    actor_.post(std::make_shared<WriteContinuation>(status, std::move(callback_)));
  }

  std::function<void(Status)> takeCallback() { return std::move(callback_); }

private:
  ActorResumer actor_;
  std::vector<T> items_;
  std::function<void(Status)> callback_;
  std::shared_ptr<const std::atomic<bool>> wanted_;  // null: while the actor lives
};

// A question parked until a bounded workqueue has room. It is counted as
// asked from the moment it is numbered, so whichever way it ends it must be
// settled exactly once: written (resolved OPEN), refused (resolved CLOSED or
// DRAINED: withdrawn), or dropped unwritten because its actor ended
// (destroyed unresolved: withdrawn). Withdrawing in resolve(), not in the
// posted callback, keeps the count right when the actor ends between the
// two.
template <class Q, class A>
class QuestionWriteWaiter final : public WriteWaiter<Job<Q>> {
public:
  QuestionWriteWaiter(caf::scheduled_actor* self, const WorkQueue<Q, A>& queue, Job<Q> job,
                      std::function<void(Status)> callback)
    : actor_(self), queue_(queue.weak()), id_(job.id), callback_(std::move(callback)) {
    items_.push_back(std::move(job));
  }
  ~QuestionWriteWaiter() override {
    if (!settled_)
      withdraw();
  }

  bool stillWaiting() const override { return actor_.alive(); }
  std::vector<Job<Q>>& pendingItems() override { return items_; }

  void resolve(Status status) override {
    settle(status);
    actor_.post(std::make_shared<WriteContinuation>(status, std::move(callback_)));
  }

  // Also for a write that happened (or was refused) without parking.
  void settle(Status status) {
    settled_ = true;
    if (status != Status::kOpen)
      withdraw();
  }
  std::function<void(Status)> takeCallback() { return std::move(callback_); }

private:
  void withdraw() {
    if (auto queue = queue_.lock())
      queue->unregisterQuestion(id_);
  }

  ActorResumer actor_;
  // Weak: the queue's channel holds this waiter while it is parked.
  std::weak_ptr<WorkQueueState<Q, A>> queue_;
  std::uint64_t id_;
  std::vector<Job<Q>> items_;
  std::function<void(Status)> callback_;
  bool settled_ = false;
};

} // namespace detail

// Reads one item for the actor `self`; `onRead(ReadResult<T>)` runs in the
// actor's context with (OPEN|CLOSED, item) or (DRAINED, nothing). Call it
// again from onRead to keep reading.
//
// `wanted`, if given, says whether the read is still wanted while it is
// parked: once it reads false the read is dropped without taking an item
// (and onRead never runs). An actor that reads for someone else (a remote
// channel's owner, for a reader on another node) clears it when that one
// goes, so no item is handed to a reader that is gone.
template <class T, class F>
void readThen(caf::scheduled_actor* self, const Channel<T>& channel, F&& onRead,
              std::shared_ptr<const std::atomic<bool>> wanted = nullptr) {
  std::function<void(ReadResult<T>)> callback(std::forward<F>(onRead));
  const auto& state = channel.state();
  auto now = state->read(nullptr, false);
  if (now.status != Status::kEmpty) {
    detail::runInActor(self, std::make_shared<detail::ReadContinuation<T>>(
                                 state, std::move(now), std::move(callback)));
    return;
  }
  auto waiter = std::make_shared<detail::ActorReadWaiter<T>>(self, state, std::move(callback),
                                                             std::move(wanted));
  if (auto raced = state->readOrPark(waiter))
    detail::runInActor(self, std::make_shared<detail::ReadContinuation<T>>(
                                 state, std::move(*raced), waiter->takeCallback()));
}

// Writes `item` for the actor `self`, parking while a bounded channel is
// full; `onWritten(Status)` then runs in the actor's context with OPEN, or
// CLOSED/DRAINED if the channel closed first (the item was not written).
// `wanted` as readThen's: once it reads false a parked write is dropped,
// item and all, as it is when its actor ends.
template <class T, class U, class F>
void writeThen(caf::scheduled_actor* self, const Channel<T>& channel, U&& item,
                F&& onWritten, std::shared_ptr<const std::atomic<bool>> wanted = nullptr) {
  std::function<void(Status)> callback(std::forward<F>(onWritten));
  const auto& state = channel.state();
  T value(std::forward<U>(item));
  auto status = state->write(
    1, [&](auto& queue) { queue.push_back(std::move(value)); }, nullptr,
    false);
  if (status != Status::kFull) {
    detail::runInActor(self, std::make_shared<detail::WriteContinuation>(
                                 status, std::move(callback)));
    return;
  }
  std::vector<T> pending;
  pending.push_back(std::move(value));
  auto waiter = std::make_shared<detail::ActorWriteWaiter<T>>(self, std::move(pending),
                                                              std::move(callback),
                                                              std::move(wanted));
  if (auto raced = state->writeOrPark(waiter))
    detail::runInActor(self, std::make_shared<detail::WriteContinuation>(
                                 *raced, waiter->takeCallback()));
}

// Reads one job for `worker` from inside the actor `self` (a workqueue
// worker as a dataflow stage): `onRead(ReadResult<Job<Q>>)` runs in the
// actor's context with a job the worker now holds (answer it as any
// Worker's), or DRAINED once the queue is closed and empty. `worker` must
// live as long as the actor (its state, say): a job read for an actor
// that is gone goes back to the queue for another worker.
template <class Q, class A, class F>
void readThen(caf::scheduled_actor* self, Worker<Q, A>& worker, F&& onRead) {
  readThen(self, worker.questions(),
           [&worker, onRead = std::forward<F>(onRead)](ReadResult<Job<Q>> job) mutable {
             onRead(worker.adopt(std::move(job)));
           });
}

// The owner's side of a workqueue from inside an actor (a workqueue as a
// dataflow stage: Dag::stage(input, queue)).
//
// Asks `question` without blocking: `onWritten(Status)` runs in the actor's
// context with OPEN once the question is queued (its answer comes through
// readThen(self, queue, ...) below, or the queue's read()), or CLOSED /
// DRAINED if the queue was closed first (the question was not asked).
template <class Q, class A, class U, class F>
void writeThen(caf::scheduled_actor* self, WorkQueue<Q, A> queue, U&& question, F&& onWritten) {
  auto waiter = std::make_shared<detail::QuestionWriteWaiter<Q, A>>(
    self, queue, queue.number(Q(std::forward<U>(question))),
    std::function<void(Status)>(std::forward<F>(onWritten)));
  const auto& state = queue.questions().state();
  auto status = state->write(
    1, [&](auto& out) { out.push_back(std::move(waiter->pendingItems().front())); }, nullptr,
    false);
  if (status == Status::kFull) {
    auto raced = state->writeOrPark(waiter);
    if (!raced)
      return;
    status = *raced;
  }
  waiter->settle(status);
  detail::runInActor(self, std::make_shared<detail::WriteContinuation>(
                               status, waiter->takeCallback()));
}

// The next answer, in completion order, for the actor `self`: `onRead(
// ReadResult<Answer<A>>)` runs in its context with an answer (value or the
// worker's error: Answer::get() rethrows it), or DRAINED once the queue is
// closed and every question asked has been answered and read. Answers to
// questions asked with WorkQueue::ask go to their futures, never here.
template <class Q, class A, class F>
void readThen(caf::scheduled_actor* self, const WorkQueue<Q, A>& queue, F&& onRead) {
  readThen(self, queue.answers(), std::forward<F>(onRead));
}

} // namespace actorpipe::dataflow
