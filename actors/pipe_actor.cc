#include <actorpipe/actors/pipe_actor.h>

#include <caf/actor_cast.hpp>
#include <caf/make_message.hpp>

#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/pipe_core.h>

namespace actorpipe {

pipe_actor as_actor(const Pipe& pipe) {
  return caf::actor_cast<pipe_actor>(pipe.core()->actor());
}

pipe_actor as_actor(const std::shared_ptr<Pipe>& pipe) { return as_actor(*pipe); }

caf::error to_caf_error(const Error& error) {
  return caf::error(uint8_t{1}, caf::atom("actorpipe"), caf::make_message(error.what()));
}

caf::actor transport_actor(const Context& context, const std::string& name) {
  auto entry = context.core()->transport(name);
  return entry ? entry->actor : caf::actor();
}

caf::actor channel_actor(const Context& context, const std::string& name) {
  auto entry = context.core()->channel(name);
  return entry ? entry->actor : caf::actor();
}

} // namespace actorpipe
