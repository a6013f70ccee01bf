#include <actorpipe/actors/dataflow/actor_io.h>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/message_view.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/send.hpp>

#include <deque>

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::dataflow::detail::ContinuationPtr)

namespace actorpipe::dataflow::detail {

namespace {

using resume_atom = caf::atom_constant<caf::atom("dfresume")>;

// Continuations an actor runs back to back before it lets its mailbox in.
constexpr int inlineBudget = 64;

struct Trampoline {
  caf::scheduled_actor* self;
  std::deque<ContinuationPtr> queue;
  int budget;
};

thread_local Trampoline* activeTrampoline = nullptr;

caf::result<caf::message> runDelivery(caf::scheduled_actor* self,
                                       caf::message_view& view) {
  auto& content = view.content();
  if (content.match_elements<resume_atom, ContinuationPtr>()) {
    runInActor(self, content.get_as<ContinuationPtr>(1));
    return caf::message{};
  }
  return caf::print_and_drop(self, view);
}

void installDeliveryHandler(caf::scheduled_actor* self) {
  self->set_default_handler(runDelivery);
}

void postTo(const caf::strong_actor_ptr& target, ContinuationPtr work) {
  caf::anon_send(caf::actor_cast<caf::actor>(target), resume_atom::value,
                 std::move(work));
}

} // namespace

void runInActor(caf::scheduled_actor* self, ContinuationPtr work) {
  if (activeTrampoline != nullptr) {
    if (activeTrampoline->self == self && activeTrampoline->budget > 0) {
      --activeTrampoline->budget;
      activeTrampoline->queue.push_back(std::move(work));
    } else {
      installDeliveryHandler(self);
      postTo(caf::strong_actor_ptr{self->ctrl()}, std::move(work));
    }
    return;
  }
  Trampoline trampoline{self, {}, inlineBudget};
  activeTrampoline = &trampoline;
  // Declared after the trampoline so it runs first while unwinding; queued
  // continuations are then destroyed, which returns their items.
  struct Leave {
    ~Leave() { activeTrampoline = nullptr; }
  } leave;
  work->run();
  work.reset();
  while (!trampoline.queue.empty()) {
    auto next = std::move(trampoline.queue.front());
    trampoline.queue.pop_front();
    next->run();
  }
}

struct ActorResumer::Handle {
  caf::weak_actor_ptr actor;
};

ActorResumer::ActorResumer(caf::scheduled_actor* self)
  : handle_(std::make_shared<const Handle>(Handle{caf::weak_actor_ptr{self->ctrl()}})) {
  installDeliveryHandler(self);
}

bool ActorResumer::alive() const {
  return handle_->actor.lock() != nullptr;
}

void ActorResumer::post(ContinuationPtr work) const {
  if (auto target = handle_->actor.lock())
    postTo(target, std::move(work));
}

} // namespace actorpipe::dataflow::detail
