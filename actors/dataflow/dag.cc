#include <actorpipe/actors/dataflow/dag.h>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>

#include <condition_variable>
#include <mutex>

namespace actorpipe::dataflow {

namespace {
// Stage actors react to nothing but their channel deliveries, yet an empty
// behavior would end them at once; this keeps them alive.
using stage_idle_atom = caf::atom_constant<caf::atom("dfidle")>;
} // namespace

namespace detail {

void finishStageActor(caf::scheduled_actor* self) {
  self->quit();
}

} // namespace detail

struct Dag::State {
  std::mutex mutex;
  std::condition_variable allEnded;
  std::size_t running = 0;
  std::exception_ptr first_error;
  std::vector<caf::actor> actors;
};

Dag::Dag(caf::actor_system& system)
  : system_(system), state_(std::make_shared<State>()) {
}

Dag::~Dag() = default;

void Dag::launch(std::shared_ptr<detail::StageBody> body, std::size_t actors) {
  for (std::size_t i = 0; i < actors; ++i) {
    {
      std::lock_guard<std::mutex> guard(state_->mutex);
      ++state_->running;
    }
    auto actor = system_.spawn([body](caf::event_based_actor* self) -> caf::behavior {
      body->start(self);
      // The behavior owns the stage: the stage lives exactly as long as one
      // of its actors does (channel callbacks only hold it weakly).
      return {[body](stage_idle_atom) {}};
    });
    // Weak: the actor keeps this functor until it ends, and the state keeps
    // the actor handle; a strong pointer would make the pair immortal.
    std::weak_ptr<State> weakState = state_;
    actor->attach_functor([weakState] {
      if (auto state = weakState.lock()) {
        std::lock_guard<std::mutex> guard(state->mutex);
        --state->running;
        state->allEnded.notify_all();
      }
    });
    std::lock_guard<std::mutex> guard(state_->mutex);
    state_->actors.push_back(std::move(actor));
  }
}

detail::ErrorSink Dag::errorSink() const {
  std::weak_ptr<State> weakState = state_;
  return [weakState](std::exception_ptr error) {
    if (auto state = weakState.lock()) {
      std::lock_guard<std::mutex> guard(state->mutex);
      if (!state->first_error)
        state->first_error = std::move(error);
    }
  };
}

void Dag::wait() {
  std::unique_lock<std::mutex> guard(state_->mutex);
  state_->allEnded.wait(guard, [&] { return state_->running == 0; });
  state_->actors.clear();
  if (auto error = state_->first_error) {
    state_->first_error = nullptr;
    std::rethrow_exception(error);
  }
}

bool Dag::waitForMs(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> guard(state_->mutex);
  if (!state_->allEnded.wait_for(guard, timeout, [&] { return state_->running == 0; }))
    return false;
  state_->actors.clear();
  if (auto error = state_->first_error) {
    state_->first_error = nullptr;
    std::rethrow_exception(error);
  }
  return true;
}

std::size_t Dag::running() const {
  std::lock_guard<std::mutex> guard(state_->mutex);
  return state_->running;
}

} // namespace actorpipe::dataflow
