#include <actorpipe/actors/pipe_actor.h>

#include <caf/actor_cast.hpp>
#include <caf/make_message.hpp>

#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/pipe_core.h>

namespace actorpipe {

PipeActor asActor(const Pipe& pipe) {
  return caf::actor_cast<PipeActor>(pipe.core()->actor());
}

PipeActor asActor(const std::shared_ptr<Pipe>& pipe) { return asActor(*pipe); }

caf::error toCafError(const Error& error) {
  return caf::error(uint8_t{1}, caf::atom("actorpipe"), caf::make_message(error.what()));
}

caf::actor TransportActor(const Context& context, const std::string& name) {
  auto entry = context.core()->transport(name);
  return entry ? entry->actor : caf::actor();
}

caf::actor ChannelActor(const Context& context, const std::string& name) {
  auto entry = context.core()->channel(name);
  return entry ? entry->actor : caf::actor();
}

} // namespace actorpipe
