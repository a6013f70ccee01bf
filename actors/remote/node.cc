#include <actorpipe/actors/remote/node.h>

#include <stdexcept>

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include <actorpipe/actors/remote/detail/node_core.h>
#include <actorpipe/actors/tensor.h>

namespace actorpipe::remote {

caf::error makeError(RemoteError code, std::string text) {
  return caf::error(static_cast<uint8_t>(code), caf::atom("actorpipe"),
                    caf::make_message(std::move(text)));
}

namespace detail {
namespace {
// Nesting depth of TrySend on this thread, and whether a send was refused.
thread_local int tTrying = 0;
thread_local bool tRefused = false;
} // namespace

TrySend::TrySend() {
  if (tTrying++ == 0) tRefused = false;
}
TrySend::~TrySend() { --tTrying; }
bool TrySend::refused() const { return tRefused; }
bool trying() { return tTrying > 0; }
void refuse() { tRefused = true; }
} // namespace detail

bool isError(const caf::error& error, RemoteError code) {
  return error && error.category() == caf::atom("actorpipe") && error.code() == static_cast<uint8_t>(code);
}

void addMessageTypes(caf::actor_system_config& config) {
  config.add_message_type<Tensor>("actorpipe::Tensor");
  config.add_message_type<std::vector<Tensor>>("std::vector<actorpipe::Tensor>");
}

void configure(caf::actor_system_config& config) {
  addMessageTypes(config);
  config.set("scheduler.policy", caf::atom("sharing"));
  // Only CAF's middleman sets an actor system's node id, and actor handles
  // in messages need one: CAF writes a handle as (actor id, node id) and
  // reads one with this system's id as one of its own actors, any other as
  // a proxy. Loaded twice (the user's own load too), the second replaces
  // the first before either starts. Its multiplexer thread sleeps unless
  // CAF's own publish/remote_actor are used; its manager actor runs on the
  // scheduler instead of a thread of its own.
  config.load<caf::io::middleman>();
  config.set("middleman.attach-utility-actors", true);
}

namespace {
caf::actor_system& withNodeId(caf::actor_system& system) {
  // Without a node id every system is "none": a peer's actor handle would
  // read as one of this system's own actors.
  if (!system.node()) {
    throw std::invalid_argument(
        "actorpipe node: the actor system has no node id; call "
        "actorpipe::remote::configure(cfg) before making it (it loads CAF's io module, "
        "which gives the system its id)");
  }
  return system;
}
} // namespace

Node::Node(caf::actor_system& system, NodeOptions options)
    : system_(withNodeId(system)),
      core_(std::make_shared<detail::NodeCore>(system, std::move(options))) {
  core_->start();
}

Node::~Node() { leave(); }

const NodeOptions& Node::options() const { return core_->options(); }

const std::string& Node::id() const { return core_->identity(); }

std::string Node::url(const std::string& transport) const { return core_->url(transport); }

Error Node::publishActor(caf::strong_actor_ptr actor, std::set<std::string> interface,
                         const std::string& name) {
  return core_->publish(std::move(actor), std::move(interface), name);
}

void Node::hostOnLoop(caf::strong_actor_ptr actor, std::chrono::microseconds budget) {
  detail::LoopUnit::of(system_).host(actor, budget);
}

void Node::endActorOnLeave(caf::strong_actor_ptr actor) { core_->endOnLeave(std::move(actor)); }

void Node::unpublish(const std::string& name) { core_->unpublish(name); }
void Node::unpublishActor(const std::string& name, const caf::strong_actor_ptr& actor) {
  if (actor) core_->unpublish(name, actor);
}

caf::expected<caf::strong_actor_ptr> Node::lookupActor(const std::string& url,
                                                       const std::string& name,
                                                       std::set<std::string>& interface) {
  if (!detail::isPlainName(name, detail::kMaxNameLength)) {
    return makeError(RemoteError::kNoSuchActor, "'" + name + "' is not a name");
  }
  auto link = core_->linkTo(url);
  if (!link) return makeError(RemoteError::kNodeLeft, "this node has left");
  return link->lookup(name, core_->options().lookupTimeout, interface);
}

caf::expected<caf::actor> Node::remoteActor(const std::string& url, const std::string& name) {
  std::set<std::string> interface;
  auto found = lookupActor(url, name, interface);
  if (!found) return std::move(found.error());
  return caf::actor_cast<caf::actor>(std::move(*found));
}

void Node::leave() { core_->leave(); }

std::vector<std::string> Node::peers() const { return core_->peers(); }

std::vector<LinkStats> Node::stats() const { return core_->stats(); }

} // namespace actorpipe::remote
