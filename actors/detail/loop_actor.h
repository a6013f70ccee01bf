#pragma once
// Actors whose mailbox is processed on a detail::Loop instead of CAF's
// scheduler: a caf::actor_companion whose enqueue hook posts to the loop.
// A pipe's actor then runs on the thread where its socket's events arrive,
// so a message costs no thread hop (and no ~40 µs wake-up) on its way.
#include <functional>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_companion.hpp>
#include <caf/behavior.hpp>
#include <caf/mailbox_element.hpp>

namespace caf {
class actor_system;
}

namespace actorpipe::detail {

class Loop;

struct LoopActorHooks {
  // Builds the behavior (called once, before the handle is returned).
  std::function<caf::behavior(caf::actor_companion* self)> init;
  // Runs on the loop when the actor terminates, with the reason in words.
  std::function<void(const std::string& reason)> onExit;
  // Answers a message that can no longer be processed (the loop has
  // stopped, or the actor is gone). Runs on the sender's thread.
  std::function<void(caf::mailbox_element& element)> bounce;
};

caf::actor spawnOnLoop(caf::actor_system& system, Loop& loop, LoopActorHooks hooks);

// Answers a request whose receiver cannot process it with `error`.
void bounceRequest(caf::mailbox_element& element, const caf::error& error);

} // namespace actorpipe::detail
