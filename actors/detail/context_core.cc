#include <actorpipe/actors/detail/context_core.h>

#include <csignal>
#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <actorpipe/actors/atoms.h>
#include <actorpipe/actors/detail/listener_core.h>
#include <actorpipe/actors/detail/loop_actor.h>
#include <actorpipe/actors/detail/pipe_core.h>
#include <actorpipe/actors/pipe_actor.h>
#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/context.h>
#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::detail {
namespace {

std::unique_ptr<caf::actor_system_config> makeConfig() {
  auto config = std::make_unique<caf::actor_system_config>();
  // Our hot paths run on transport loops, not on CAF's scheduler: two
  // workers are plenty for supervisors and listeners.
  config->set("scheduler.max-threads", size_t{2});
  // Work sharing: idle workers block on a condition variable. CAF's default,
  // work stealing, polls with short sleeps; each of those wake-ups preempts
  // the loop thread on its CPU (a pinned process's loop shares one), ~3,000
  // context switches in 100,000 shm round trips, and costs an idle process
  // 0.3-1 % of a core. Sharing: ~150, 0.0 %, p99 9.7 -> 7.8 µs (2 vCPUs,
  // docs/benchmarks.md). Our scheduled actors see a message now and then;
  // they do not need stealing's throughput.
  config->set("scheduler.policy", caf::atom("sharing"));
  return config;
}

}  // namespace

ContextCore::ContextCore(ContextOptions options) : options_(std::move(options)) {
  // A write to a socket whose peer died must be an error, not a signal that
  // kills the process.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  loop_ = std::make_shared<Loop>(options_.name().empty() ? "context" : options_.name());
  loop_->setPollWindow(options_.pollWindow());
  if (options_.actorSystem() != nullptr) {
    system_ = options_.actorSystem();
  } else {
    // The system keeps a reference to its config: both live as long as we do.
    ownConfig_ = makeConfig();
    ownSystem_ = std::make_unique<caf::actor_system>(*ownConfig_);
    system_ = ownSystem_.get();
  }
}

ContextCore::~ContextCore() {
  join();
  // Every actor of ours is done by now (join waited), so the system's
  // destructor does not wait on anything.
  ownSystem_.reset();
}

// The Context's actor: watches every transport and channel actor and takes
// the backend out of the registry when its actor goes down.
void ContextCore::start() {
  std::weak_ptr<ContextCore> weak = shared_from_this();
  supervisor_ = system_->spawn([weak](caf::event_based_actor* self) -> caf::behavior {
    using Watched = std::map<caf::actor_addr, std::pair<std::string, std::string>>;
    auto watched = std::make_shared<Watched>();
    self->set_down_handler([self, weak, watched](caf::down_msg& msg) {
      auto it = watched->find(msg.source);
      if (it == watched->end()) return;
      if (auto core = weak.lock()) {
        const std::string reason = msg.reason ? self->system().render(msg.reason) : "its actor exited";
        // A backend stopped by its Context closing is news only at debug.
        if (!msg.reason || msg.reason == caf::exit_reason::user_shutdown) {
          ACTORPIPE_LOG(kDebug, it->second.first << " '" << it->second.second << "' stopped: " << reason);
        } else {
          ACTORPIPE_LOG(kWarn, it->second.first << " '" << it->second.second << "' went down: " << reason);
        }
        core->markDown(it->second.first, it->second.second, reason);
      }
      watched->erase(it);
    });
    return {
        [self, watched](watch_atom, caf::actor& backend, std::string& kind, std::string& name) {
          self->monitor(backend);
          (*watched)[backend.address()] = {kind, name};
        },
    };
  });
}

void ContextCore::registerTransport(int64_t priority, std::string name,
                                    std::shared_ptr<transport::Context> context) {
  if (!context) throw std::invalid_argument("registerTransport: null transport context");
  std::lock_guard<std::mutex> guard(mutex_);
  if (closed_) throw std::logic_error("registerTransport: the context is closed");
  if (transports_.count(name)) {
    throw std::invalid_argument("registerTransport: '" + name + "' is already registered");
  }
  // A transport used before it was registered keeps the loop it has.
  if (!context->adoptLoop(loop_)) {
    context->loop().setPollWindow(options_.pollWindow());
  }
  auto entry = std::make_shared<TransportEntry>();
  entry->name = name;
  entry->priority = priority;
  entry->context = context;
  // The transport's actor lives on the transport's loop; when it goes down
  // (killed, or crashed), every connection and listener of the transport
  // fails with the reason, and the supervisor retires the transport.
  LoopActorHooks hooks;
  hooks.init = [](caf::actor_companion*) -> caf::behavior {
    return {[](ping_atom) { return ok_atom::value; }};
  };
  std::weak_ptr<transport::Context> weakTransport = context;
  hooks.onExit = [weakTransport, name](const std::string& reason) {
    if (auto t = weakTransport.lock()) {
      t->shutdown(ACTORPIPE_ERROR(BackendDownError, "transport '" + name + "'", reason));
    }
  };
  hooks.bounce = [](caf::mailbox_element& e) {
    bounceRequest(e, toCafError(ACTORPIPE_ERROR(ContextClosedError)));
  };
  entry->actor = spawnOnLoop(*system_, context->loop(), std::move(hooks));
  caf::anon_send(supervisor_, watch_atom::value, entry->actor, std::string("transport"), name);
  transports_[name] = std::move(entry);
}

void ContextCore::registerChannel(int64_t priority, std::string name,
                                  std::shared_ptr<channel::Context> context) {
  if (!context) throw std::invalid_argument("registerChannel: null channel context");
  std::lock_guard<std::mutex> guard(mutex_);
  if (closed_) throw std::logic_error("registerChannel: the context is closed");
  if (channels_.count(name)) {
    throw std::invalid_argument("registerChannel: '" + name + "' is already registered");
  }
  auto entry = std::make_shared<ChannelEntry>();
  entry->name = name;
  entry->priority = priority;
  entry->context = context;
  // The channel's actor owns it: however the actor ends (killed, crashed,
  // or stopped by the Context's join), the channel is closed, which fails
  // its pending transfers and releases what it holds (mpt's lanes). The
  // pipes using it watch the actor and fail; the supervisor retires it.
  std::weak_ptr<channel::Context> weakChannel = context;
  entry->actor = system_->spawn([weakChannel](caf::event_based_actor* self) -> caf::behavior {
    self->attach_functor([weakChannel](const caf::error&) {
      if (auto channel = weakChannel.lock()) channel->close();
    });
    return {[](ping_atom) { return ok_atom::value; }};
  });
  caf::anon_send(supervisor_, watch_atom::value, entry->actor, std::string("channel"), name);
  channels_[name] = std::move(entry);
}

std::shared_ptr<const TransportEntry> ContextCore::transport(const std::string& name) const {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = transports_.find(name);
  return it == transports_.end() ? nullptr : it->second;
}

std::shared_ptr<const ChannelEntry> ContextCore::channel(const std::string& name) const {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = channels_.find(name);
  return it == channels_.end() ? nullptr : it->second;
}

wire::Hello ContextCore::hello() const {
  std::lock_guard<std::mutex> guard(mutex_);
  wire::Hello hello;
  hello.contextName = options_.name();
  for (const auto& t : transports_) {
    const auto& e = *t.second;
    if (e.down || !e.context->isViable()) continue;
    hello.transports.push_back({e.name, e.priority, e.context->domainDescriptor(), {}, {}});
  }
  for (const auto& c : channels_) {
    const auto& e = *c.second;
    if (e.down || !e.context->isViable()) continue;
    hello.channels.push_back({e.name, e.priority, e.context->domainDescriptor(), e.context->deviceTypes(),
                              e.context->helloDetail()});
  }
  return hello;
}

void ContextCore::markDown(const std::string& kind, const std::string& name, const std::string& reason) {
  std::lock_guard<std::mutex> guard(mutex_);
  Error down = ACTORPIPE_ERROR(BackendDownError, kind + " '" + name + "'", reason);
  // Entries are shared read-only with pipes: replace, never modify.
  if (kind == "transport") {
    auto it = transports_.find(name);
    if (it != transports_.end()) {
      auto copy = std::make_shared<TransportEntry>(*it->second);
      copy->down = down;
      it->second = copy;
    }
  } else {
    auto it = channels_.find(name);
    if (it != channels_.end()) {
      auto copy = std::make_shared<ChannelEntry>(*it->second);
      copy->down = down;
      it->second = copy;
    }
  }
}

void ContextCore::track(const std::shared_ptr<PipeCore>& pipe) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (pipes_.size() >= 64 && pipes_.size() % 64 == 0) {
    std::vector<std::weak_ptr<PipeCore>> live;
    for (auto& w : pipes_) if (!w.expired()) live.push_back(w);
    pipes_.swap(live);
  }
  pipes_.push_back(pipe);
}

void ContextCore::track(const std::shared_ptr<ListenerCore>& listener) {
  std::lock_guard<std::mutex> guard(mutex_);
  listeners_.push_back(listener);
}

Error ContextCore::closedError() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return closed_;
}

void ContextCore::close() {
  std::vector<std::weak_ptr<PipeCore>> pipes;
  std::vector<std::weak_ptr<ListenerCore>> listeners;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (closed_) return;
    closed_ = ACTORPIPE_ERROR(ContextClosedError);
    pipes = pipes_;
    listeners = listeners_;
  }
  for (auto& weak : listeners) {
    if (auto l = weak.lock()) l->close(closed_);
  }
  for (auto& weak : pipes) {
    if (auto p = weak.lock()) p->close(closed_);
  }
}

void ContextCore::join() {
  close();
  std::map<std::string, std::shared_ptr<TransportEntry>> transports;
  std::map<std::string, std::shared_ptr<ChannelEntry>> channels;
  std::vector<std::weak_ptr<ListenerCore>> listeners;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (joined_) return;
    joined_ = true;
    transports = transports_;
    channels = channels_;
    listeners = listeners_;
  }
  // Listener, channel and supervisor actors run on CAF's scheduler: end them
  // and wait, so none of them calls back after we return.
  caf::scoped_actor self{*system_};
  std::vector<caf::actor> ending;
  for (auto& weak : listeners) {
    if (auto l = weak.lock()) {
      ending.push_back(l->actor());
      l->terminate(closed_);
    }
  }
  for (auto& c : channels) {
    ending.push_back(c.second->actor);
    caf::anon_send_exit(c.second->actor, caf::exit_reason::user_shutdown);
  }
  ending.push_back(supervisor_);
  caf::anon_send_exit(supervisor_, caf::exit_reason::user_shutdown);
  for (auto& a : ending) self->monitor(a);
  for (size_t i = 0; i < ending.size(); ++i) {
    self->receive([](caf::down_msg&) {});
  }
  // Each loop runs what is queued (the closes above, and the callbacks they
  // fire) before it stops; its transport actor ends with it.
  for (auto& t : transports) {
    caf::anon_send_exit(t.second->actor, caf::exit_reason::normal);
    t.second->context->join();
  }
  for (auto& c : channels) {
    c.second->context->join();
  }
  loop_->stop();
}

} // namespace actorpipe::detail
