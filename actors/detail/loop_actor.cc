#include <actorpipe/actors/detail/loop_actor.h>

#include <atomic>
#include <memory>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/scoped_execution_unit.hpp>
#include <caf/sec.hpp>
#include <caf/spawn_options.hpp>
#include <caf/system_messages.hpp>

#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::detail {
namespace {

class Binding : public std::enable_shared_from_this<Binding> {
 public:
  Binding(caf::actor_system& system, Loop& loop, caf::actor_companion* self,
          LoopActorHooks hooks)
      : system_(system), loop_(loop), self_(self), hooks_(std::move(hooks)), unit_(&system) {}

  void enqueue(caf::mailbox_element_ptr ptr) {
    if (dead_.load(std::memory_order_acquire)) {
      bounce(std::move(ptr));
      return;
    }
    // std::function needs a copyable task: carry the element as a raw
    // pointer, owned again by dispatch() (post either runs it or refuses).
    auto* raw = ptr.release();
    auto self = shared_from_this();
    if (!loop_.post([self, raw] { self->dispatch(caf::mailbox_element_ptr(raw)); })) {
      caf::mailbox_element_ptr element(raw);
      if (element->content().match_elements<caf::exit_msg>()) {
        // The loop is gone: end the actor here, nothing else can run it.
        if (!dead_.exchange(true)) {
          self_->cleanup(caf::error(element->content().get_as<caf::exit_msg>(0).reason), &unit_);
        }
        keepAlive_.reset();
        return;
      }
      bounce(std::move(element));
    }
  }

  // The companion must not be destroyed in the middle of its own activation
  // (its owner may drop the last handle from inside a handler): we hold a
  // reference until it has exited, and let go on a later loop turn.
  void hold(caf::strong_actor_ptr ptr) { keepAlive_ = std::move(ptr); }

  void recordExit(const caf::error& reason) { exitReason_ = reason; }

  void exited() {
    dead_.store(true, std::memory_order_release);
    if (hooks_.onExit) {
      hooks_.onExit(exitReason_ ? system_.render(exitReason_) : std::string("normal exit"));
    }
    auto self = shared_from_this();
    loop_.post([self] { self->keepAlive_.reset(); });
  }

 private:
  void dispatch(caf::mailbox_element_ptr ptr) {
    if (dead_.load(std::memory_order_acquire)) {
      bounce(std::move(ptr));
      return;
    }
    self_->activate(&unit_, *ptr);
  }

  void bounce(caf::mailbox_element_ptr ptr) {
    if (ptr && hooks_.bounce) {
      hooks_.bounce(*ptr);
    }
  }

  caf::actor_system& system_;
  Loop& loop_;
  caf::actor_companion* self_;
  LoopActorHooks hooks_;
  caf::scoped_execution_unit unit_;
  std::atomic<bool> dead_{false};
  caf::error exitReason_;
  caf::strong_actor_ptr keepAlive_;
};

}  // namespace

caf::actor spawnOnLoop(caf::actor_system& system, Loop& loop, LoopActorHooks hooks) {
  // Hidden: the actor system's shutdown does not wait for these; their
  // owners end them before the loops stop.
  auto handle = system.spawn<caf::actor_companion, caf::hidden>();
  auto* self = static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(handle));
  auto init = std::move(hooks.init);
  auto binding = std::make_shared<Binding>(system, loop, self, std::move(hooks));
  self->on_enqueue([binding](caf::mailbox_element_ptr ptr) { binding->enqueue(std::move(ptr)); });
  self->on_exit([binding] { binding->exited(); });
  // Any exit message ends the actor, a normal one too: owners end their
  // actors with exit_reason::normal when the pipe or listener is done.
  self->set_exit_handler([self, binding](caf::exit_msg& msg) {
    binding->recordExit(msg.reason);
    self->quit(msg.reason);
  });
  self->become(init(self));
  binding->hold(caf::actor_cast<caf::strong_actor_ptr>(handle));
  return handle;
}

void bounceRequest(caf::mailbox_element& element, const caf::error& error) {
  if (!element.mid.is_request() || !element.sender) {
    return;
  }
  auto response = element.mid.response_id();
  element.sender->enqueue(nullptr, response, caf::make_message(error), nullptr);
}

} // namespace actorpipe::detail
