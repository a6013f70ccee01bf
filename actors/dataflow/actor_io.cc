#include <actorpipe/actors/dataflow/actor_io.h>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/message_view.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/send.hpp>

#include <actorpipe/runtime/detail/log.h>

#include <cstdint>
#include <deque>
#include <string>

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
// The actor whose Delivery runs on this thread, if any.
thread_local caf::scheduled_actor* deliveringFor = nullptr;

// CAF keeps an actor's default handler protected and offers no getter; a
// pointer to the member taken through a derived class reads it legally.
struct DefaultHandlerOf : caf::scheduled_actor {
  static default_handler caf::scheduled_actor::*member() {
    return &DefaultHandlerOf::default_handler_;
  }
};

using CafDefault = caf::result<caf::message> (*)(caf::scheduled_actor*, caf::message_view&);

// Unexpected messages past this many are reported only at powers of two:
// a peer that floods an actor gets a few lines out of it, not one each.
constexpr uint64_t reportedInFull = 8;
constexpr size_t shownChars = 160;

// An actor's default handler once it reads or writes channels: it runs
// posted continuations and hands everything else to the handler the actor
// had before (its own, if it set one first). In place of CAF's
// print_and_drop, which prints every message whole, it logs a bounded
// report and answers as print_and_drop does.
class Delivery {
public:
  explicit Delivery(caf::scheduled_actor::default_handler previous)
    : previous_(std::move(previous)) {
  }

  caf::result<caf::message> operator()(caf::scheduled_actor* self, caf::message_view& view) {
    // While this runs, CAF holds it apart and the actor's handler is empty
    // (scheduled_actor::call_handler); it is put back unless replaced.
    struct Delivering {
      explicit Delivering(caf::scheduled_actor* self) : outer(deliveringFor) { deliveringFor = self; }
      ~Delivering() { deliveringFor = outer; }
      caf::scheduled_actor* outer;
    } delivering(self);
    auto& content = view.content();
    if (content.match_elements<resume_atom, ContinuationPtr>()) {
      runInActor(self, content.get_as<ContinuationPtr>(1));
      return caf::message{};
    }
    if (previous_)
      return previous_(self, view);
    report(self, content);
    return caf::sec::unexpected_message;
  }

private:
  void report(caf::scheduled_actor* self, const caf::type_erased_tuple& content) {
    ++unexpected_;
    bool inFull = unexpected_ <= reportedInFull;
    if (!inFull && (unexpected_ & (unexpected_ - 1)) != 0)
      return;
    ACTORPIPE_LOG(kWarn, "actor " << self->id() << " (" << self->name()
                                  << "): unexpected message dropped: " << shown(content)
                                  << (inFull ? "" : " (" + std::to_string(unexpected_) +
                                                      " so far; only some are logged)"));
  }

  static std::string shown(const caf::type_erased_tuple& content) {
    auto text = content.stringify();
    if (text.size() > shownChars) {
      auto whole = text.size();
      text.resize(shownChars);
      text += "... (" + std::to_string(whole) + " characters)";
    }
    return text;
  }

  caf::scheduled_actor::default_handler previous_;  // null: CAF's own, replaced
  uint64_t unexpected_ = 0;
};

void postTo(const caf::strong_actor_ptr& target, ContinuationPtr work) {
  caf::anon_send(caf::actor_cast<caf::actor>(target), resume_atom::value,
                 std::move(work));
}

} // namespace

void installDeliveryHandler(caf::scheduled_actor* self) {
  auto& current = self->*DefaultHandlerOf::member();
  // Parking again from inside a delivery (or the handler it wraps): the
  // Delivery is held apart meanwhile and CAF puts it back if this leaves
  // the handler empty; replacing it would lose the handler it wraps.
  if (current.target<Delivery>() != nullptr || (!current && deliveringFor == self))
    return;
  auto* cafs = current.target<CafDefault>();
  bool cafsOwn = cafs != nullptr && *cafs == &caf::print_and_drop;
  current = Delivery(cafsOwn ? nullptr : std::move(current));
}

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

void runInActorAfter(caf::scheduled_actor* self, std::chrono::milliseconds delay, ContinuationPtr work) {
  installDeliveryHandler(self);
  caf::delayed_anon_send(caf::actor_cast<caf::actor>(self->ctrl()), delay, resume_atom::value,
                         std::move(work));
}

void ActorResumer::post(ContinuationPtr work) const {
  if (auto target = handle_->actor.lock())
    postTo(target, std::move(work));
}

} // namespace actorpipe::dataflow::detail
