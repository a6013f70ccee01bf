#pragma once
// The library's own published actors (a channel's owner, a workqueue's
// owner, a client/server server) serve every node; importChannel's reader
// and a client's agent can be addressed by any peer once exported. A peer
// may link one of its actors to them, as CAF allows, and that actor may
// then end with an error, or its node be lost: CAF's default exit handler
// would end the owner with it, for every other node too (a hand-made peer
// needs only a LINK and a DOWN). They follow exits from their own node
// only; a peer's end is already handled where it matters (its parked
// requests, its workers).
// An error sent to them as a message (not as an answer) ends them too by
// CAF's default, and a peer's actor sends one by mistake easily: CAF
// answers a message an actor did not expect, `send` rather than `request`
// to one of their requests, with such an error. They ignore those; nothing
// of theirs sends them errors that way. Messages they do not expect are
// reported in a bounded number of log lines, not a line each
// (installDeliveryHandler in actor_io.h).
#include <caf/system_messages.hpp>
#include <caf/scheduled_actor.hpp>

#include <actorpipe/actors/dataflow/actor_io.h>

namespace actorpipe::remote::detail {

inline void serveEveryNode(caf::scheduled_actor* self) {
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (msg.source && msg.source.node() != self->node()) return;
    if (msg.reason) self->quit(std::move(msg.reason));  // CAF's default
  });
  self->set_error_handler([](caf::error&) {});
  actorpipe::dataflow::detail::installDeliveryHandler(self);
}

} // namespace actorpipe::remote::detail
