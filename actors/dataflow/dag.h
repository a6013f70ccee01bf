#pragma once

// Pipelines of actor stages joined by channels.
//
//   Dag dag(system);
//   Channel<Tensor> input(8);
//   auto hidden = dag.stage(input, layer1);          // Channel<Tensor>
//   auto output = dag.stage(hidden, layer2, {2, 8}); // two actors, capacity 8
//   ... write input, input.close(), read output until DRAINED ...
//   dag.wait();
//
// Each stage is one or more actors that read their input with readThen and
// write with writeThen, so no stage ever blocks a scheduler thread. When a
// stage's input is drained, its actors end, and the last one closes the
// stage's output: closing the input cascades through every stage. If a
// downstream channel is closed early, a stage closes its own input, so the
// shutdown also travels upstream. An exception from a stage function closes
// that stage's input and output, and Dag::wait rethrows it.
//
// A workqueue is a stage too: dag.stage(input, queue) asks it each item and
// puts its answers on the output; dag.serve(queue, fn) runs its workers as
// actors. Exported (remote::exportWorkQueue), its workers may be actors on
// other nodes: the stage is the same.

#include <actorpipe/actors/dataflow/actor_io.h>
#include <actorpipe/actors/dataflow/channel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace actorpipe::dataflow {

struct StageOptions {
  // Actors sharing the stage's input (each item reaches one of them); with
  // more than one, the stage function is called concurrently.
  std::size_t actors = 1;
  // Capacity of the stage's output channel; 0 means unbounded.
  std::size_t capacity = 0;
};

namespace detail {

class StageBody {
public:
  virtual ~StageBody() = default;
  // Runs in a fresh actor's initialisation.
  virtual void start(caf::scheduled_actor* self) = 0;
};

// Ends the calling stage actor.
void finishStageActor(caf::scheduled_actor* self);

using ErrorSink = std::function<void(std::exception_ptr)>;

template <class In, class Out, class Fn>
class ForwardingStage final : public StageBody,
                              public std::enable_shared_from_this<ForwardingStage<In, Out, Fn>> {
public:
  static constexpr bool isSink = std::is_void_v<Out>;
  using OutChannel = Channel<std::conditional_t<isSink, int, Out>>;

  ForwardingStage(std::vector<Channel<In>> inputs, OutChannel output, Fn fn,
                  std::size_t actors, ErrorSink errors)
    : inputs_(std::move(inputs)), output_(std::move(output)), fn_(std::move(fn)),
      liveActors_(actors), errors_(std::move(errors)) {
  }

  void start(caf::scheduled_actor* self) override {
    pump(self, nextInput_.fetch_add(1) % inputs_.size());
  }

private:
  // The callbacks hold the stage weakly and name their input by index: a
  // parked callback lives inside the input channel, so owning pointers to
  // the stage (which owns the channels) would form a cycle and leak an
  // abandoned pipeline. The stage actor owns the stage, so whenever a
  // callback runs in that actor the lock succeeds.
  void pump(caf::scheduled_actor* self, std::size_t which) {
    std::weak_ptr<ForwardingStage> weak = this->shared_from_this();
    readThen(self, inputs_[which], [weak, self, which](ReadResult<In> read) {
      auto me = weak.lock();
      if (!me)
        return;
      if (!read.item) {
        me->actorDone(self);
        return;
      }
      if constexpr (isSink) {
        if (me->apply(*read.item, me->inputs_[which]))
          me->pump(self, which);
        else
          me->actorDone(self);
      } else {
        auto produced = me->apply(*read.item, me->inputs_[which]);
        if (!produced) {
          me->actorDone(self);
          return;
        }
        writeThen(self, me->output_, std::move(*produced), [weak, self, which](Status status) {
          auto me = weak.lock();
          if (!me)
            return;
          if (status == Status::kOpen) {
            me->pump(self, which);
            return;
          }
          // Nobody downstream wants more: tell upstream to stop too.
          me->inputs_[which].close();
          me->actorDone(self);
        });
      }
    });
  }

  // Runs the stage function; on an exception reports it and shuts the stage
  // down on both sides. Returns false then.
  auto apply(In& item, const Channel<In>& input) {
    using Produced = std::conditional_t<isSink, bool, std::optional<Out>>;
    Produced produced{};
    try {
      if constexpr (isSink) {
        fn_(std::move(item));
        produced = true;
      } else {
        produced.emplace(fn_(std::move(item)));
      }
    } catch (...) {
      errors_(std::current_exception());
      input.close();
      output_.close();
    }
    return produced;
  }

  void actorDone(caf::scheduled_actor* self) {
    if (liveActors_.fetch_sub(1) == 1)
      output_.close();
    finishStageActor(self);
  }

  std::vector<Channel<In>> inputs_;
  OutChannel output_;
  Fn fn_;
  std::atomic<std::size_t> liveActors_;
  std::atomic<std::size_t> nextInput_{0};
  ErrorSink errors_;
};

// A workqueue as a stage (Dag::stage(input, queue)): one actor asks the
// queue each item of the input, another reads the answers into the output.
// The queue's workers do the work, wherever they run (threads, actors,
// other nodes' actors through remote::exportWorkQueue).
template <class Q, class A>
class WorkQueueStage final : public StageBody,
                             public std::enable_shared_from_this<WorkQueueStage<Q, A>> {
public:
  WorkQueueStage(Channel<Q> input, WorkQueue<Q, A> queue, Channel<A> output, ErrorSink errors)
    : input_(std::move(input)), queue_(std::move(queue)), output_(std::move(output)),
      errors_(std::move(errors)) {
  }

  void start(caf::scheduled_actor* self) override {
    if (started_.fetch_add(1) == 0)
      ask(self);
    else
      collect(self);
  }

private:
  // Callbacks hold the stage weakly, as ForwardingStage's do.
  void ask(caf::scheduled_actor* self) {
    std::weak_ptr<WorkQueueStage> weak = this->shared_from_this();
    readThen(self, input_, [weak, self](ReadResult<Q> read) {
      auto me = weak.lock();
      if (!me)
        return;
      if (!read.item) {
        // Every question is asked: the workers drain the queue, and its
        // answers end (DRAINED) once the last one is read.
        me->queue_.close();
        finishStageActor(self);
        return;
      }
      writeThen(self, me->queue_, std::move(*read.item), [weak, self](Status status) {
        auto me = weak.lock();
        if (!me)
          return;
        if (status == Status::kOpen) {
          me->ask(self);
          return;
        }
        // The queue was closed under us (an error, the output closed, or
        // its owner): nobody will take more, so upstream stops too.
        me->input_.close();
        finishStageActor(self);
      });
    });
  }

  void collect(caf::scheduled_actor* self) {
    std::weak_ptr<WorkQueueStage> weak = this->shared_from_this();
    readThen(self, queue_, [weak, self](ReadResult<Answer<A>> read) {
      auto me = weak.lock();
      if (!me)
        return;
      if (!read.item) {
        me->output_.close();
        finishStageActor(self);
        return;
      }
      if (read.item->error) {
        // A question without its answer (the worker threw, or was lost):
        // the stage's error, as a stage function's exception is.
        me->errors_(read.item->error);
        me->shutDown();
        finishStageActor(self);
        return;
      }
      writeThen(self, me->output_, std::move(*read.item->value), [weak, self](Status status) {
        auto me = weak.lock();
        if (!me)
          return;
        if (status == Status::kOpen) {
          me->collect(self);
          return;
        }
        me->shutDown();
        finishStageActor(self);
      });
    });
  }

  void shutDown() {
    input_.close();
    queue_.close();
    output_.close();
  }

  Channel<Q> input_;
  WorkQueue<Q, A> queue_;
  Channel<A> output_;
  ErrorSink errors_;
  std::atomic<int> started_{0};
};

// Workers as a stage (Dag::serve(queue, fn)): each actor is a Worker of the
// queue, answering its jobs with fn until the queue is drained.
template <class Q, class A, class Fn>
class WorkerStage final : public StageBody,
                          public std::enable_shared_from_this<WorkerStage<Q, A, Fn>> {
public:
  WorkerStage(const WorkQueue<Q, A>& queue, Fn fn, std::size_t actors) : fn_(std::move(fn)) {
    // Made here, not in start(): start() runs concurrently in each actor.
    for (std::size_t i = 0; i < actors; ++i)
      workers_.push_back(std::make_unique<Worker<Q, A>>(queue.worker()));
  }

  void start(caf::scheduled_actor* self) override {
    serve(self, *workers_[started_.fetch_add(1)]);
  }

private:
  // The Workers live as long as the stage, so a job an actor read and did
  // not answer (the system shut down under it) is answered with WorkerLost
  // when the last actor ends.
  void serve(caf::scheduled_actor* self, Worker<Q, A>& worker) {
    std::weak_ptr<WorkerStage> weak = this->shared_from_this();
    readThen(self, worker, [weak, self, &worker](ReadResult<Job<Q>> job) {
      auto me = weak.lock();
      if (!me)
        return;
      if (!job.item) {
        finishStageActor(self);
        return;
      }
      auto id = job.item->id;
      try {
        worker.answer(id, me->fn_(std::move(job.item->question)));
      } catch (...) {
        // The question's answer, as Worker::serve makes it: the owner sees it.
        worker.fail(id, std::current_exception());
      }
      me->serve(self, worker);
    });
  }

  Fn fn_;
  std::vector<std::unique_ptr<Worker<Q, A>>> workers_;
  std::atomic<std::size_t> started_{0};
};

} // namespace detail

class Dag {
public:
  explicit Dag(caf::actor_system& system);
  Dag(const Dag&) = delete;
  Dag& operator=(const Dag&) = delete;
  // Does not wait: stage actors that are still parked simply become
  // unreachable and end, so dropping an unfinished Dag cannot hang shutdown.
  ~Dag();

  // out = fn(in) for every item of `input`; returns the output channel.
  template <class In, class Fn>
  auto stage(Channel<In> input, Fn fn, StageOptions options = {}) {
    options.actors = std::max<std::size_t>(1, options.actors);
    using Out = std::invoke_result_t<Fn&, In>;
    static_assert(!std::is_void_v<Out>, "use sink() for a function returning void");
    Channel<Out> output(options.capacity);
    launch(std::make_shared<detail::ForwardingStage<In, Out, Fn>>(
             std::vector<Channel<In>>{std::move(input)}, output, std::move(fn),
             options.actors, errorSink()),
           options.actors);
    return output;
  }

  // fn(in) for every item of `input`; the end of a pipeline.
  template <class In, class Fn>
  void sink(Channel<In> input, Fn fn, StageOptions options = {}) {
    options.actors = std::max<std::size_t>(1, options.actors);
    launch(std::make_shared<detail::ForwardingStage<In, void, Fn>>(
             std::vector<Channel<In>>{std::move(input)}, Channel<int>(1), std::move(fn),
             options.actors, errorSink()),
           options.actors);
  }

  // Each item of `input` asked of `queue`; returns the answers, in the order
  // they come. The queue's workers do the work: threads, actors (serve()
  // below), or actors on other nodes (remote::exportWorkQueue). When the
  // input is drained the queue is closed, and the output once every answer
  // is through; a closed output closes the queue and the input. An error
  // answer (the worker threw, WorkerLost, remote::RemoteWorkFailed) closes
  // all three, and wait() rethrows it. The stage owns the queue's answers:
  // questions others write() to it come out here too (ask()'s go to their
  // futures).
  template <class Q, class A>
  Channel<A> stage(Channel<Q> input, WorkQueue<Q, A> queue, std::size_t capacity = 0) {
    Channel<A> output(capacity);
    launch(std::make_shared<detail::WorkQueueStage<Q, A>>(std::move(input), std::move(queue),
                                                          output, errorSink()),
           2);
    return output;
  }

  // `options.actors` workers of `queue`, each answering its jobs with
  // fn(question) until the queue is drained (closed and empty); an exception
  // from fn is that question's answer (the owner sees it), not the Dag's.
  template <class Q, class A, class Fn>
  void serve(const WorkQueue<Q, A>& queue, Fn fn, StageOptions options = {}) {
    options.actors = std::max<std::size_t>(1, options.actors);
    launch(std::make_shared<detail::WorkerStage<Q, A, Fn>>(queue, std::move(fn), options.actors),
           options.actors);
  }

  // One channel fed by all `inputs`; closes once every input is drained.
  template <class T>
  Channel<T> merge(std::vector<Channel<T>> inputs, std::size_t capacity = 0) {
    Channel<T> output(capacity);
    auto actors = inputs.size();
    auto forward = [](T item) { return item; };
    launch(std::make_shared<detail::ForwardingStage<T, T, decltype(forward)>>(
             std::move(inputs), output, forward, actors, errorSink()),
           actors);
    return output;
  }

  // Waits until every stage actor has ended; rethrows the first exception a
  // stage function raised.
  void wait();
  // Like wait, but gives up after `timeout`; returns whether all ended.
  template <class Rep, class Period>
  bool waitFor(std::chrono::duration<Rep, Period> timeout) {
    return waitForMs(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  }

  // Stage actors still running.
  std::size_t running() const;

private:
  // `actors` is at least one: a stage without actors would never close its
  // output.
  void launch(std::shared_ptr<detail::StageBody> body, std::size_t actors);
  detail::ErrorSink errorSink() const;
  bool waitForMs(std::chrono::milliseconds timeout);

  struct State;
  caf::actor_system& system_;
  std::shared_ptr<State> state_;
};

} // namespace actorpipe::dataflow
