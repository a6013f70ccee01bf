#pragma once
// A listener: one transport listener per URL, feeding handshaken pipes to
// the listener's actor, which pairs them with accept() calls in order.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/transports/context.h>

namespace actorpipe::detail {

class ContextCore;
class JoinRegistry;
struct TransportEntry;

class ListenerCore : public std::enable_shared_from_this<ListenerCore> {
 public:
  static std::shared_ptr<ListenerCore> create(const std::shared_ptr<ContextCore>& context,
                                              const std::vector<std::string>& urls);
  explicit ListenerCore(std::shared_ptr<ContextCore> context);
  ~ListenerCore();

  void accept(Listener::accept_callback_fn fn);
  void close(Error reason);
  // Ends the actor (Context::join): later accepts fail at once.
  void terminate(Error reason);

  const caf::actor& actor() const { return actor_; }
  const std::map<std::string, std::string>& addresses() const { return addresses_; }

 private:
  void spawnActor();
  void armAccept(std::shared_ptr<transport::Listener> listener,
                 std::shared_ptr<const TransportEntry> transport);

  std::shared_ptr<ContextCore> context_;
  caf::actor actor_;
  std::map<std::string, std::string> addresses_;
  std::vector<std::shared_ptr<transport::Listener>> listeners_;
  std::vector<std::shared_ptr<const TransportEntry>> transports_;
  std::shared_ptr<JoinRegistry> registry_;
  // Connections between arrival and accept(): see Limits::maxPendingPipes.
  std::shared_ptr<std::atomic<size_t>> pending_ = std::make_shared<std::atomic<size_t>>(0);
  std::atomic<bool> terminated_{false};
  Error terminatedReason_;
};

} // namespace actorpipe::detail
