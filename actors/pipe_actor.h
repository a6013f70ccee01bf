#pragma once
// Driving a pipe from an actor: request an operation, get the result as a
// reply, no callbacks. Errors arrive as caf::error in category "actorpipe"
// whose context holds Error::what().
//
//   auto p = actorpipe::asActor(pipe);
//   self->request(p, caf::infinite, actorpipe::write_atom::value, msg)
//       .then([](actorpipe::ok_atom) { ... }, [](caf::error& e) { ... });
#include <memory>

#include <caf/error.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <actorpipe/actors/atoms.h>
#include <actorpipe/runtime/context.h>

namespace actorpipe {

using PipeActor = caf::typed_actor<
    caf::replies_to<write_atom, Message>::with<ok_atom>,
    caf::replies_to<read_descriptor_atom>::with<Descriptor>,
    caf::replies_to<read_atom, Allocation>::with<ok_atom>,
    caf::reacts_to<close_atom>>;

// The pipe's actor. Its handlers for this interface are a
// PipeActor::behavior_type (actors/detail/pipe_core.cc), so the compiler has
// checked them against it. The handle does not keep the pipe open: the Pipe
// object does.
PipeActor asActor(const Pipe& pipe);
PipeActor asActor(const std::shared_ptr<Pipe>& pipe);

// Our errors in CAF's terms: code 1, category "actorpipe", context = what().
caf::error toCafError(const Error& error);

// The supervised actor of a registered transport or channel (for monitoring,
// or to take it down); an invalid handle for unknown names.
caf::actor TransportActor(const Context& context, const std::string& name);
caf::actor ChannelActor(const Context& context, const std::string& name);

} // namespace actorpipe
