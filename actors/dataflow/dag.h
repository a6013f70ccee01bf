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
