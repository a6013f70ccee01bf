#include <actorpipe/actors/detail/listener_core.h>

#include <atomic>
#include <deque>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <actorpipe/actors/atoms.h>
#include <actorpipe/actors/detail/auth.h>
#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/frames.h>
#include <actorpipe/actors/detail/join_registry.h>
#include <actorpipe/actors/detail/pipe_core.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/runtime/detail/url.h>
#include <actorpipe/runtime/detail/call_user.h>
#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::detail {
struct PendingSlot;
}
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<actorpipe::detail::PendingSlot>)

namespace actorpipe::detail {
namespace {

}  // namespace

// Counts a connection against Limits::maxPendingPipes from its arrival until
// its pipe is handed to an accept() callback (or it goes away).
struct PendingSlot {
  explicit PendingSlot(std::shared_ptr<std::atomic<size_t>> c) : count(std::move(c)) { ++*count; }
  ~PendingSlot() { --*count; }
  std::shared_ptr<std::atomic<size_t>> count;
};

namespace {

// The listener actor's state: accept() calls and handshaken pipes, paired
// in arrival order. Runs on CAF's scheduler; accept callbacks run there.
struct AcceptQueue {
  Error error;
  std::deque<Listener::accept_callback_fn> accepts;
  std::deque<std::pair<std::shared_ptr<Pipe>, std::shared_ptr<PendingSlot>>> ready;

  void match() {
    while (!accepts.empty() && (error || !ready.empty())) {
      auto fn = std::move(accepts.front());
      accepts.pop_front();
      if (error) {
        callUser("a listener's accept callback", fn, error, nullptr);
        continue;
      }
      auto pipe = std::move(ready.front().first);
      ready.pop_front();  // releases its pending slot
      callUser("a listener's accept callback", fn, Error(), std::move(pipe));
    }
  }
  void fail(Error e) {
    if (error) return;
    error = std::move(e);
    for (auto& entry : ready) entry.first->close();
    ready.clear();
    match();
  }
};

}  // namespace

ListenerCore::ListenerCore(std::shared_ptr<ContextCore> context) : context_(std::move(context)) {}

ListenerCore::~ListenerCore() {
  for (auto& l : listeners_) l->close();
  if (actor_) {
    caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
  }
}

void ListenerCore::spawnActor() {
  actor_ = context_->system().spawn([](caf::event_based_actor* self) -> caf::behavior {
    auto queue = std::make_shared<AcceptQueue>();
    // Accepts still waiting when the actor ends hear why.
    self->attach_functor([queue](const caf::error&) {
      queue->fail(ACTORPIPE_ERROR(ListenerClosedError));
    });
    return {
        [queue](accept_atom, Listener::accept_callback_fn& fn) {
          queue->accepts.push_back(std::move(fn));
          queue->match();
        },
        [queue](ready_atom, std::shared_ptr<Pipe>& pipe, std::shared_ptr<PendingSlot>& slot) {
          if (queue->error) {
            pipe->close();
            return;
          }
          queue->ready.emplace_back(std::move(pipe), std::move(slot));
          queue->match();
        },
        [queue](failed_atom, Error& error) { queue->fail(std::move(error)); },
        [queue](close_atom, Error& error) { queue->fail(std::move(error)); },
    };
  });
}

std::shared_ptr<ListenerCore> ListenerCore::create(const std::shared_ptr<ContextCore>& context,
                                                   const std::vector<std::string>& urls) {
  auto core = std::make_shared<ListenerCore>(context);
  core->spawnActor();
  Error error = context->closedError();
  if (urls.empty() && !error) {
    error = ACTORPIPE_ERROR(LogicError, "listen() needs at least one URL");
  }
  for (const auto& url : urls) {
    if (error) break;
    std::string scheme, address;
    if (!splitUrl(url, scheme, address)) {
      error = ACTORPIPE_ERROR(LogicError, "bad URL '" + url + "': expected scheme://address");
      break;
    }
    auto transport = context->transport(scheme);
    if (!transport) {
      error = ACTORPIPE_ERROR(UnknownTransportError, url);
      break;
    }
    if (transport->down) {
      error = transport->down;
      break;
    }
    auto listener = transport->context->listen(address);
    core->listeners_.push_back(listener);
    core->transports_.push_back(transport);
    core->addresses_[scheme] = listener->addr();
  }
  core->registry_ = std::make_shared<JoinRegistry>(core->addresses_);
  for (size_t i = 0; i < core->listeners_.size(); ++i) {
    core->armAccept(core->listeners_[i], core->transports_[i]);  // a failed bind reports through here
  }
  if (error) {
    caf::anon_send(core->actor_, failed_atom::value, error);
  }
  return core;
}

namespace {

// Whether a new connection has greeted (or failed), and the timer that drops
// it if it does neither in time. Loop thread only.
struct Greeting {
  explicit Greeting(Loop& loop) : loop(loop) {}
  void finish() {
    done = true;
    if (timer != 0) loop.cancel(timer);
    timer = 0;
  }
  Loop& loop;
  bool done{false};
  Loop::TimerId timer{0};
};

}  // namespace

// Each accepted connection greets first: a HELLO starts a new pipe, a JOIN
// brings a pipe that is moving here from another transport of this listener.
void ListenerCore::armAccept(std::shared_ptr<transport::Listener> listener,
                             std::shared_ptr<const TransportEntry> transport) {
  std::weak_ptr<ListenerCore> weak = shared_from_this();
  auto context = context_;
  auto registry = registry_;
  auto pending = pending_;
  caf::actor actor = actor_;
  listener->accept([weak, listener, transport, context, registry, actor, pending](
                       const Error& error, std::shared_ptr<transport::Connection> connection) {
    if (error) {
      caf::anon_send(actor, failed_atom::value, error);
      return;
    }
    auto self = weak.lock();
    if (!self) {
      connection->close(ACTORPIPE_ERROR(ListenerClosedError));
      return;
    }
    if (pending->load() >= context->limits().maxPendingPipes) {
      // Too many handshakes or unaccepted pipes already: refuse, cheaply.
      connection->close(ACTORPIPE_ERROR(LimitExceededError, "pending pipes", pending->load(),
                                        context->limits().maxPendingPipes));
      self->armAccept(listener, transport);
      return;
    }
    auto slot = std::make_shared<PendingSlot>(pending);
    // A connection that never greets must not hold a descriptor for ever;
    // the timer holds it weakly, and goes as soon as the connection greets
    // or fails, so a peer that connects and resets costs nothing after.
    auto greeted = std::make_shared<Greeting>(transport->context->loop());
    auto timeout = context->options().handshakeTimeout();
    if (timeout.count() > 0) {
      std::weak_ptr<transport::Connection> weakConnection = connection;
      greeted->timer = transport->context->loop().after(timeout, [greeted, weakConnection] {
        greeted->timer = 0;
        auto connection = weakConnection.lock();
        if (!greeted->done && connection) {
          ACTORPIPE_LOG(kDebug, "dropping a connection from " << connection->peerAddress()
                                    << " that did not greet in time");
          connection->close(ACTORPIPE_ERROR(TimeoutError, "a new connection's greeting", 0));
        }
      });
    }
    auto dispatch = [context, transport, connection, registry, actor, greeted, slot](wire::FrameType type,
                                                                                     std::vector<uint8_t>& body) {
      greeted->finish();
      if (type == wire::FrameType::kJoin) {
        wire::Join join;
        auto pipe = wire::decode(body.data(), body.size(), context->limits(), join) ? nullptr
                                                                                     : registry->claim(join.token);
        if (!pipe || pipe->loop() != &transport->context->loop()) {
          return connection->close(ACTORPIPE_ERROR(ProtocolError, "join for no pipe"));
        }
        return pipe->adoptJoin(transport, connection);
      }
      if (type != wire::FrameType::kHello) {
        return connection->close(ACTORPIPE_ERROR(ProtocolError, "expected a hello"));
      }
      auto pipe = PipeCore::accept(context, transport, connection, body, registry,
                                   [actor, slot](const Error& e, std::shared_ptr<PipeCore> core) {
        // A failed handshake concerns that peer only; the listener goes on.
        if (e || !core) return;
        auto handle = std::make_shared<Pipe>(core, core->remoteName());
        caf::anon_send(actor, ready_atom::value, std::move(handle), slot);
      });
      context->track(pipe);
    };
    readFrame(connection, handshakeLimits(context->limits()),
              [context, connection, dispatch, greeted](const Error& e, wire::FrameType type,
                                                       std::vector<uint8_t>& body) {
      // A connection that cannot greet properly concerns itself only.
      if (e) {
        greeted->finish();
        return connection->close(e);
      }
      const std::string& secret = context->options().secret();
      auto first = std::make_shared<std::vector<uint8_t>>(std::move(body));
      authenticateAsAcceptor(connection, secret, context->limits(), uint8_t(type), *first,
                             [context, connection, dispatch, secret, type, first, greeted](const Error& e) {
        if (e) {
          greeted->finish();  // refused: the connection is closing
          return;
        }
        if (secret.empty()) return dispatch(type, *first);
        readFrame(connection, handshakeLimits(context->limits()),
                  [connection, dispatch, greeted](const Error& e, wire::FrameType type, std::vector<uint8_t>& body) {
          if (e) {
            greeted->finish();
            return connection->close(e);
          }
          dispatch(type, body);
        });
      });
    });
    self->armAccept(listener, transport);
  });
}

void ListenerCore::accept(Listener::accept_callback_fn fn) {
  if (terminated_.load(std::memory_order_acquire)) {
    callUser("a listener's accept callback", fn, terminatedReason_, nullptr);
    return;
  }
  caf::anon_send(actor_, accept_atom::value, std::move(fn));
}

void ListenerCore::close(Error reason) {
  caf::anon_send(actor_, close_atom::value, std::move(reason));
  for (auto& l : listeners_) l->close();
}

void ListenerCore::terminate(Error reason) {
  terminatedReason_ = reason;
  terminated_.store(true, std::memory_order_release);
  close(reason);
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

} // namespace actorpipe::detail
