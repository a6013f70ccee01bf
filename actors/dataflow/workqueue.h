#pragma once

// Workqueues (torch-ipc style): the owner writes questions and reads
// answers; workers read questions and write answers.
//
// Every question gets an id. A worker answers the job it read; a Worker that
// is destroyed (returns, or unwinds on an exception) with unanswered jobs
// answers them with a WorkerLost error, so an owner waiting for answers never
// waits for a peer that is gone.

#include <actorpipe/actors/dataflow/channel.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

namespace actorpipe::dataflow {

// The answer a worker could not give because it went away first.
class WorkerLost : public std::runtime_error {
public:
  WorkerLost() : std::runtime_error("workqueue worker ended without answering") {}
};

template <class Q>
struct Job {
  std::uint64_t id = 0;
  Q question;
};

template <class A>
struct Answer {
  std::uint64_t id = 0;
  std::optional<A> value;
  std::exception_ptr error;

  bool ok() const { return !error; }
  // The value, or the worker's exception rethrown.
  A& get() {
    if (error)
      std::rethrow_exception(error);
    return *value;
  }
};

namespace detail {

// Process-wide table of named queues; type-checked so that two parts of a
// program cannot open one name with different question/answer types.
std::shared_ptr<void> findOrCreateNamed(const std::string& name,
                                           std::type_index type,
                                           const std::function<std::shared_ptr<void>()>& create);
void forgetNamed(const std::string& name, const void* state);

template <class Q, class A>
class WorkQueueState {
public:
  WorkQueueState(std::size_t capacity, std::string name)
    : questions(capacity), name(std::move(name)) {
  }

  std::uint64_t registerQuestion(std::optional<std::promise<A>> promise) {
    std::lock_guard<std::mutex> guard(mutex);
    auto id = next_id++;
    ++asked;
    if (promise)
      tickets.emplace(id, std::move(*promise));
    return id;
  }

  void unregisterQuestion(std::uint64_t id) {
    std::lock_guard<std::mutex> guard(mutex);
    --asked;
    tickets.erase(id);
    maybeFinishLocked();
    // One fewer asked may be every one answered: drain() waits for that.
    allAnswered.notify_all();
  }

  void deliver(Answer<A> answer) {
    std::optional<std::promise<A>> ticket;
    {
      std::lock_guard<std::mutex> guard(mutex);
      auto it = tickets.find(answer.id);
      if (it != tickets.end()) {
        ticket.emplace(std::move(it->second));
        tickets.erase(it);
      }
    }
    if (ticket) {
      if (answer.error)
        ticket->set_exception(answer.error);
      else
        ticket->set_value(std::move(*answer.value));
    } else {
      answers.write(std::move(answer));
    }
    std::lock_guard<std::mutex> guard(mutex);
    ++answered;
    maybeFinishLocked();
    allAnswered.notify_all();
  }

  void close() {
    questions.close();
    std::lock_guard<std::mutex> guard(mutex);
    closed = true;
    maybeFinishLocked();
  }

  // Once closed and fully answered nothing more can arrive: let the owner's
  // reads see DRAINED instead of waiting forever.
  void maybeFinishLocked() {
    if (closed && answered >= asked)
      answers.close();
  }

  Channel<Job<Q>> questions;
  Channel<Answer<A>> answers;
  const std::string name;
  std::mutex mutex;
  std::condition_variable allAnswered;
  std::uint64_t next_id = 1;
  std::uint64_t asked = 0;
  std::uint64_t answered = 0;
  bool closed = false;
  std::unordered_map<std::uint64_t, std::promise<A>> tickets;
};

} // namespace detail

template <class Q, class A>
class WorkQueue;

// A worker's attachment to a queue. Movable, not copyable: it owns the jobs
// it has read and not yet answered. Use each Worker from one thread at a
// time; start one Worker per worker thread.
template <class Q, class A>
class Worker {
public:
  Worker(Worker&&) noexcept = default;
  Worker& operator=(Worker&&) = delete;
  Worker(const Worker&) = delete;
  ~Worker() { abandonUnanswered(); }

  // Waits for the next question; DRAINED once the queue is closed and empty.
  ReadResult<Job<Q>> read() { return track(state_->questions.read()); }
  ReadResult<Job<Q>> tryRead() { return track(state_->questions.tryRead()); }
  template <class Rep, class Period>
  ReadResult<Job<Q>> readFor(std::chrono::duration<Rep, Period> timeout) {
    return track(state_->questions.readFor(timeout));
  }

  // For reads that do not block (readThen in actor_io.h, remote workers):
  // the queue's questions, and handing this worker a job read from them.
  const Channel<Job<Q>>& questions() const { return state_->questions; }
  ReadResult<Job<Q>> adopt(ReadResult<Job<Q>> job) { return track(std::move(job)); }

  // Answers job `id` (which this worker read).
  void answer(std::uint64_t id, A value) {
    settle(id);
    state_->deliver(Answer<A>{id, std::move(value), nullptr});
  }
  // Answers the oldest job this worker has not answered yet.
  void answer(A value) { answer(oldest(), std::move(value)); }

  // Answers job `id` with an error the owner sees when it takes the answer.
  void fail(std::uint64_t id, std::exception_ptr error) {
    settle(id);
    state_->deliver(Answer<A>{id, std::nullopt, std::move(error)});
  }

  // Answers questions with `fn(question)` until the queue is drained; an
  // exception from fn becomes that question's error answer. Returns the
  // number of questions handled.
  template <class Fn>
  std::size_t serve(Fn&& fn) {
    std::size_t handled = 0;
    for (;;) {
      auto job = read();
      if (!job.item)
        return handled;
      ++handled;
      auto id = job.item->id;
      try {
        answer(id, fn(std::move(job.item->question)));
      } catch (...) {
        fail(id, std::current_exception());
      }
    }
  }

private:
  friend class WorkQueue<Q, A>;
  explicit Worker(std::shared_ptr<detail::WorkQueueState<Q, A>> state)
    : state_(std::move(state)) {
  }

  ReadResult<Job<Q>> track(ReadResult<Job<Q>> job) {
    if (job.item)
      unanswered_.push_back(job.item->id);
    return job;
  }

  std::uint64_t oldest() const {
    if (unanswered_.empty())
      throw std::logic_error("Worker::answer: no unanswered question");
    return unanswered_.front();
  }

  void settle(std::uint64_t id) {
    auto it = std::find(unanswered_.begin(), unanswered_.end(), id);
    if (it == unanswered_.end())
      throw std::logic_error("Worker::answer: job " + std::to_string(id)
                             + " is not held by this worker");
    unanswered_.erase(it);
  }

  void abandonUnanswered() {
    if (!state_)
      return;
    auto lost = std::make_exception_ptr(WorkerLost());
    for (auto id : unanswered_)
      state_->deliver(Answer<A>{id, std::nullopt, lost});
    unanswered_.clear();
  }

  std::shared_ptr<detail::WorkQueueState<Q, A>> state_;
  std::vector<std::uint64_t> unanswered_;
};

template <class Q, class A>
class WorkQueue {
public:
  // An anonymous queue; `capacity` bounds the pending questions (0: none).
  explicit WorkQueue(std::size_t capacity = 0)
    : state_(std::make_shared<detail::WorkQueueState<Q, A>>(capacity, std::string())) {
  }

  // The queue called `name`, shared by everyone in the process who opens
  // that name, until it is closed; opening the name again afterwards gives a
  // fresh queue.
  static WorkQueue named(const std::string& name, std::size_t capacity = 0) {
    auto erased = detail::findOrCreateNamed(
      name, std::type_index(typeid(detail::WorkQueueState<Q, A>)),
      [&] { return std::make_shared<detail::WorkQueueState<Q, A>>(capacity, name); });
    return WorkQueue(std::static_pointer_cast<detail::WorkQueueState<Q, A>>(erased));
  }

  // -- owner side -------------------------------------------------------------

  // Asks a question whose answer arrives through read().
  Status write(Q question) {
    auto id = state_->registerQuestion(std::nullopt);
    auto status = state_->questions.write(Job<Q>{id, std::move(question)});
    if (status != Status::kOpen)
      state_->unregisterQuestion(id);
    return status;
  }

  // Asks a question whose answer is matched to it: it goes to the returned
  // future (value or the worker's exception), never to read().
  std::future<A> ask(Q question) {
    std::promise<A> promise;
    auto future = promise.get_future();
    auto id = state_->registerQuestion(std::move(promise));
    auto status = state_->questions.write(Job<Q>{id, std::move(question)});
    if (status != Status::kOpen) {
      state_->unregisterQuestion(id);
      std::promise<A> refused;
      refused.set_exception(std::make_exception_ptr(
        std::runtime_error("WorkQueue::ask: queue is closed")));
      return refused.get_future();
    }
    return future;
  }

  // Next answer in completion order; DRAINED once the queue is closed and
  // every answer has been read.
  ReadResult<Answer<A>> read() { return state_->answers.read(); }
  ReadResult<Answer<A>> tryRead() { return state_->answers.tryRead(); }
  template <class Rep, class Period>
  ReadResult<Answer<A>> readFor(std::chrono::duration<Rep, Period> timeout) {
    return state_->answers.readFor(timeout);
  }

  // Waits until every question asked so far has been answered.
  void drain() {
    std::unique_lock<std::mutex> guard(state_->mutex);
    state_->allAnswered.wait(guard, [&] { return state_->answered >= state_->asked; });
  }
  template <class Rep, class Period>
  bool drainFor(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> guard(state_->mutex);
    return state_->allAnswered.wait_for(guard, timeout, [&] {
      return state_->answered >= state_->asked;
    });
  }

  // Refuses new questions; workers finish the queued ones and then read
  // DRAINED, which releases them. A named queue leaves the process table.
  void close() {
    state_->close();
    if (!state_->name.empty())
      detail::forgetNamed(state_->name, state_.get());
  }

  std::uint64_t unanswered() const {
    std::lock_guard<std::mutex> guard(state_->mutex);
    return state_->asked - state_->answered;
  }

  // -- worker side ------------------------------------------------------------

  Worker<Q, A> worker() const { return Worker<Q, A>(state_); }

  // -- for an owner that must not block (writeThen/readThen in actor_io.h) ----

  // The question numbered and counted as asked, to be written to
  // questions(); if that write is refused, withdraw(id) uncounts it (else the
  // answers would wait for it for ever).
  Job<Q> number(Q question) {
    return Job<Q>{state_->registerQuestion(std::nullopt), std::move(question)};
  }
  void withdraw(std::uint64_t id) { state_->unregisterQuestion(id); }
  // The queue without keeping it alive: a question parked in the queue's
  // own channel must not hold the queue (they would keep each other).
  std::weak_ptr<detail::WorkQueueState<Q, A>> weak() const { return state_; }
  const Channel<Job<Q>>& questions() const { return state_->questions; }
  const Channel<Answer<A>>& answers() const { return state_->answers; }

  bool sameQueue(const WorkQueue& other) const { return state_ == other.state_; }

private:
  explicit WorkQueue(std::shared_ptr<detail::WorkQueueState<Q, A>> state)
    : state_(std::move(state)) {
  }

  std::shared_ptr<detail::WorkQueueState<Q, A>> state_;
};

} // namespace actorpipe::dataflow
