#pragma once
// The Context's state: its registry of transports and channels, the actors
// that supervise them, and the pipes and listeners to close on shutdown.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include <actorpipe/runtime/detail/wire.h>
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/options.h>

namespace caf {
class actor_system;
class actor_system_config;
}

namespace actorpipe {
namespace transport {
class Context;
}
namespace channel {
class Context;
}
}  // namespace actorpipe

namespace actorpipe::detail {

class PipeCore;
class ListenerCore;
class Loop;

struct TransportEntry {
  std::string name;
  int64_t priority{0};
  std::shared_ptr<transport::Context> context;
  caf::actor actor;  // runs on the transport's loop; its exit fails the transport
  Error down;        // set once its actor went down
};

struct ChannelEntry {
  std::string name;
  int64_t priority{0};
  std::shared_ptr<channel::Context> context;
  caf::actor actor;  // pipes using the channel monitor it
  Error down;
};

class ContextCore : public std::enable_shared_from_this<ContextCore> {
 public:
  explicit ContextCore(ContextOptions options);
  ~ContextCore();

  // Must follow construction (needs shared_from_this).
  void start();

  void registerTransport(int64_t priority, std::string name,
                         std::shared_ptr<transport::Context> context);
  void registerChannel(int64_t priority, std::string name,
                       std::shared_ptr<channel::Context> context);

  // Snapshot lookups, thread-safe. Null when unknown.
  std::shared_ptr<const TransportEntry> transport(const std::string& name) const;
  std::shared_ptr<const ChannelEntry> channel(const std::string& name) const;
  // What this context offers a peer in its hello.
  wire::Hello hello() const;

  void track(const std::shared_ptr<PipeCore>& pipe);
  void track(const std::shared_ptr<ListenerCore>& listener);

  // Called by the supervisor when a backend's actor goes down.
  void markDown(const std::string& kind, const std::string& name, const std::string& reason);

  void setId(std::string id) { id_ = std::move(id); }
  const ContextOptions& options() const { return options_; }
  const Limits& limits() const { return options_.limits(); }
  caf::actor_system& system() { return *system_; }
  // The thread every pipe of this Context runs on: what builds on pipes
  // (a group's collectives) runs its own state there too, with no lock.
  Loop& loop() { return *loop_; }
  // Set once close() began: new pipes and listeners fail with it.
  Error closedError() const;

  void close();
  void join();

 private:
  ContextOptions options_;
  std::string id_;
  std::unique_ptr<caf::actor_system_config> ownConfig_;
  std::unique_ptr<caf::actor_system> ownSystem_;
  caf::actor_system* system_{nullptr};
  caf::actor supervisor_;
  // Every transport registered here runs on this loop (if it can), and so
  // does every pipe: one thread for the Context's I/O and pipe actors.
  std::shared_ptr<Loop> loop_;

  mutable std::mutex mutex_;
  Error closed_;
  bool joined_{false};
  std::map<std::string, std::shared_ptr<TransportEntry>> transports_;
  std::map<std::string, std::shared_ptr<ChannelEntry>> channels_;
  std::vector<std::weak_ptr<PipeCore>> pipes_;
  std::vector<std::weak_ptr<ListenerCore>> listeners_;
};

} // namespace actorpipe::detail
