// The pipe's handshake: one connection, no extra round trip after the
// welcome, and a move to a better transport when both peers can use one.
//
//   connector                              acceptor (its listener read the HELLO)
//   kConnecting --HELLO---------------->   kAccepting: choose transport, channels
//               <-----------REJECT         kClosed (both fail: NegotiationError)
//               <-----------WELCOME        kEstablished            (same transport)
//               <-----------WELCOME(T, address, token)
//   connect to address over T                kAwaitingJoin
//   --JOIN(token) on T----------------->   listener on T hands the connection over
//   kEstablished                           kEstablished
//
// The connector writes its hello before TCP has connected: the transport
// queues it, and a refused connection fails the hello's write, so the pipe's
// first operations fail with a ConnectError naming the address and the cause.
// Operations asked before kEstablished wait, in order, and go out right after.
// Only the acceptor decides, by the sum of both sides' priorities, so peers
// that registered different priorities always agree.
#include <actorpipe/actors/detail/pipe_core.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include <caf/send.hpp>

#include <actorpipe/actors/atoms.h>
#include <actorpipe/actors/detail/auth.h>
#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/frames.h>
#include <actorpipe/actors/detail/join_registry.h>
#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::detail {
namespace {

// How long an accepting pipe waits for its connector on the better transport.
constexpr std::chrono::seconds kJoinTimeout{10};

std::string names(const std::vector<wire::Offer>& offers) {
  std::string s;
  for (const auto& o : offers) s += (s.empty() ? "" : ", ") + o.name;
  return "[" + s + "]";
}

const wire::Offer* find(const std::vector<wire::Offer>& offers, const std::string& name) {
  for (const auto& o : offers) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string priorities(const wire::Offer& mine, const wire::Offer& theirs) {
  return "priorities " + std::to_string(mine.priority) + " + " + std::to_string(theirs.priority);
}

}  // namespace

std::shared_ptr<PipeCore> PipeCore::connect(const std::shared_ptr<ContextCore>& context,
                                            std::shared_ptr<const TransportEntry> transport,
                                            const std::string& url, const std::string& address,
                                            const PipeOptions& options) {
  auto core = std::make_shared<PipeCore>(context, &transport->context->loop());
  if (options.handshakeTimeout()) core->handshakeTimeout_ = *options.handshakeTimeout();
  if (options.operationTimeout()) core->operationTimeout_ = *options.operationTimeout();
  core->transport_ = std::move(transport);
  core->url_ = url;
  core->state_ = State::kConnecting;
  ACTORPIPE_LOG(kDebug, "pipe " << core->id_ << ": connecting to " << url);
  core->spawnActor();
  // Resolving a name may block: done here, on the caller's thread.
  auto connection = core->transport_->context->connect(address);
  if (!core->loop_->post([core, connection] {
        core->connection_ = connection;
        core->startConnector();
      })) {
    core->state_ = State::kClosed;
    core->error_ = ACTORPIPE_ERROR(ContextClosedError);
    connection->close(core->error_);
  }
  return core;
}

std::shared_ptr<PipeCore> PipeCore::accept(const std::shared_ptr<ContextCore>& context,
                                           std::shared_ptr<const TransportEntry> transport,
                                           std::shared_ptr<transport::Connection> connection,
                                           const std::vector<uint8_t>& hello,
                                           std::shared_ptr<JoinRegistry> registry, ready_fn ready) {
  auto core = std::make_shared<PipeCore>(context, &transport->context->loop());
  core->transport_ = std::move(transport);
  core->connection_ = std::move(connection);
  core->url_ = core->transport_->name + "://" + core->connection_->peerAddress();
  core->state_ = State::kAccepting;
  ACTORPIPE_LOG(kDebug, "pipe " << core->id_ << ": accepted from " << core->url_);
  core->registry_ = std::move(registry);
  core->ready_ = std::move(ready);
  core->spawnActor();
  core->armHandshakeTimer();
  core->onHello(hello.data(), hello.size());  // we are on the loop
  return core;
}

// --- connecting side ----------------------------------------------------------

void PipeCore::armHandshakeTimer() {
  if (handshakeTimeout_.count() <= 0) return;
  std::weak_ptr<PipeCore> weak = shared_from_this();
  auto timeout = handshakeTimeout_;
  handshakeTimer_ = loop_->after(timeout, [weak, timeout] {
    if (auto core = weak.lock()) {
      core->handshakeTimer_ = 0;
      core->fail(ACTORPIPE_ERROR(TimeoutError, "the handshake with " + core->url_, timeout.count()));
    }
  });
}

void PipeCore::startConnector() {
  if (error_) {
    connection_->close(error_);
    return;
  }
  armHandshakeTimer();
  auto self = shared_from_this();
  // With a secret, both sides prove themselves first (auth.h); without one
  // the hello goes out at once, before TCP has even connected.
  authenticateAsConnector(connection_, context_->options().secret(), context_->limits(),
                          [self](const Error& e) {
    if (e) return self->fail(e);
    if (self->error_) return;
    self->sayHello();
  });
}

void PipeCore::sayHello() {
  auto hello = std::make_shared<std::string>(frameOf(wire::FrameType::kHello, context_->hello()));
  auto self = shared_from_this();
  connection_->write(hello->data(), hello->size(), [self, hello](const Error& e) {
    if (e) self->fail(e);
  });
  readFrame(connection_, handshakeLimits(context_->limits()),
            [self](const Error& e, wire::FrameType type, std::vector<uint8_t>& body) {
    if (e) return self->fail(e);
    if (self->error_) return;
    if (type == wire::FrameType::kReject) {
      wire::Reject reject;
      auto error = wire::decode(body.data(), body.size(), self->context_->limits(), reject);
      if (error) return self->fail(error);
      if (reject.kind == wire::Reject::kAuthentication) {
        return self->fail(ACTORPIPE_ERROR(AuthenticationError, "the peer refused us: " + reject.reason));
      }
      return self->fail(ACTORPIPE_ERROR(NegotiationError, "the peer refused the pipe: " + reject.reason));
    }
    if (type != wire::FrameType::kWelcome) {
      return self->fail(ACTORPIPE_ERROR(ProtocolError, "expected a welcome, got frame type " +
                                                           std::to_string(int(type))));
    }
    self->onWelcome(body.data(), body.size());
  });
}

void PipeCore::onWelcome(const uint8_t* body, size_t length) {
  wire::Welcome welcome;
  if (auto error = wire::decode(body, length, context_->limits(), welcome)) return fail(error);
  remoteName_ = welcome.contextName;
  notes_ = welcome.notes;
  for (const auto& choice : welcome.channels) {
    auto entry = context_->channel(choice.second);
    if (!entry || entry->down) {
      return fail(ACTORPIPE_ERROR(NegotiationError,
                                  "the peer chose channel '" + choice.second + "', which we lack"));
    }
    channels_[choice.first] = choice.second;
    caf::anon_send(actor_, watch_atom::value, entry->actor);
    if (entry->context->makesEndpoints() && !endpoints_.count(choice.second)) {
      auto setup = std::find_if(welcome.setups.begin(), welcome.setups.end(),
                                [&](const auto& s) { return s.first == choice.second; });
      if (setup == welcome.setups.end()) {
        return fail(ACTORPIPE_ERROR(ProtocolError, "no setup for channel '" + choice.second + "'"));
      }
      Error error;
      auto endpoint = entry->context->connectEndpoint(setup->second, error);
      if (!endpoint) return fail(error);
      endpoint->attach(*loop_);
      endpoints_[choice.second] = std::move(endpoint);
    }
  }
  if (welcome.transport == transport_->name) {
    return establish();
  }
  // The acceptor found a better transport we share: move there. Nothing may
  // go out on the new connection before its authentication and the JOIN.
  auto entry = context_->transport(welcome.transport);
  if (!entry || entry->down || &entry->context->loop() != loop_) {
    return fail(ACTORPIPE_ERROR(NegotiationError, "the peer moved the pipe to transport '" +
                                                      welcome.transport + "', which we cannot use"));
  }
  auto joined = entry->context->connect(welcome.address);
  auto self = shared_from_this();
  uint64_t token = welcome.joinToken;
  authenticateAsConnector(joined, context_->options().secret(), context_->limits(),
                          [self, joined, entry, token](const Error& e) {
    if (e) return self->fail(e);
    if (self->error_) return joined->close(self->error_);
    auto join = std::make_shared<std::string>(frameOf(wire::FrameType::kJoin, wire::Join{token}));
    joined->write(join->data(), join->size(), [self, join](const Error& e) {
      if (e) self->fail(e);
    });
    self->connection_->close(ACTORPIPE_ERROR(PipeClosedError));
    self->connection_ = joined;
    self->transport_ = entry;
    self->establish();
  });
}

// --- accepting side -----------------------------------------------------------

void PipeCore::onHello(const uint8_t* body, size_t length) {
  wire::Hello hello;
  if (auto error = wire::decode(body, length, context_->limits(), hello)) return fail(error);
  remoteName_ = hello.contextName;
  wire::Hello ours = context_->hello();
  std::vector<std::string> notes;

  // Transport: the one we were reached over, or a better one both sides have
  // in the same domain (same host, for shm), that this listener listens on,
  // and that runs on this pipe's loop.
  const wire::Offer* current = find(ours.transports, transport_->name);
  const wire::Offer* peerCurrent = find(hello.transports, transport_->name);
  if (current == nullptr || peerCurrent == nullptr ||
      peerCurrent->domainDescriptor != current->domainDescriptor) {
    return reject("no common transport: the peer connected over '" + transport_->name +
                  "' but offers " + names(hello.transports));
  }
  std::string bestTransport = transport_->name;
  int64_t bestScore = current->priority + peerCurrent->priority;
  for (const auto& mine : ours.transports) {
    if (mine.name == transport_->name) continue;
    const wire::Offer* theirs = find(hello.transports, mine.name);
    auto entry = context_->transport(mine.name);
    if (theirs == nullptr) {
      notes.push_back("transport " + mine.name + ": the peer does not offer it");
    } else if (theirs->domainDescriptor != mine.domainDescriptor) {
      notes.push_back("transport " + mine.name + ": out of the peer's reach (" + mine.domainDescriptor +
                      " here, " + theirs->domainDescriptor + " there)");
    } else if (!registry_ || !registry_->addresses().count(mine.name)) {
      notes.push_back("transport " + mine.name + ": the listener does not listen on it");
    } else if (!entry || &entry->context->loop() != loop_) {
      notes.push_back("transport " + mine.name + ": runs on another loop");
    } else {
      int64_t score = mine.priority + theirs->priority;
      if (score > bestScore || (score == bestScore && mine.name < bestTransport)) {
        notes.push_back("transport " + bestTransport + ": lower priority than " + mine.name);
        bestTransport = mine.name;
        bestScore = score;
      } else {
        notes.push_back("transport " + mine.name + ": lower priority than " + bestTransport);
      }
    }
  }
  notes.insert(notes.begin(), "transport " + bestTransport + ": chosen (priority sum " +
                                  std::to_string(bestScore) + ")");

  // Channels: per device type, among those both sides have in the same
  // domain, the highest sum of both priorities wins, ties by name. The
  // kernel's word on the peer (shm) lets cma check who it is dealing with.
  auto finalTransport = context_->transport(bestTransport);
  const bool knowsPeer = finalTransport && finalTransport->context->knowsPeerProcess();
  const std::optional<PeerProcess> kernelPeer = connection_->peerProcess();
  std::map<std::string, std::string> chosen;
  std::map<std::string, int64_t> bestChannelScore;
  for (const auto& mine : ours.channels) {
    const wire::Offer* theirs = find(hello.channels, mine.name);
    if (theirs == nullptr) {
      notes.push_back("channel " + mine.name + ": the peer does not offer it");
      continue;
    }
    if (theirs->domainDescriptor != mine.domainDescriptor) {
      notes.push_back("channel " + mine.name + ": out of the peer's reach (" + mine.domainDescriptor +
                      " here, " + theirs->domainDescriptor + " there)");
      continue;
    }
    std::string why;
    auto entry = context_->channel(mine.name);
    if (entry && entry->context->needsPeerProcess() && !knowsPeer) {
      notes.push_back("channel " + mine.name + ": transport " + bestTransport +
                      " cannot tell which process the peer is");
      continue;
    }
    if (entry && !entry->context->reachable(theirs->detail, kernelPeer ? &*kernelPeer : nullptr, why)) {
      notes.push_back("channel " + mine.name + ": " + why);
      continue;
    }
    for (const auto& device : mine.deviceTypes) {
      if (std::find(theirs->deviceTypes.begin(), theirs->deviceTypes.end(), device) ==
          theirs->deviceTypes.end()) continue;
      int64_t score = mine.priority + theirs->priority;
      auto it = bestChannelScore.find(device);
      if (it == bestChannelScore.end() || score > it->second ||
          (score == it->second && mine.name < chosen[device])) {
        bestChannelScore[device] = score;
        chosen[device] = mine.name;
      }
    }
  }
  for (const auto& theirs : hello.channels) {
    if (find(ours.channels, theirs.name) == nullptr) {
      notes.push_back("channel " + theirs.name + ": not offered here");
    }
  }
  if (chosen.empty()) {
    return reject("no common channel: we offer " + names(ours.channels) + ", the peer offers " +
                  names(hello.channels));
  }
  for (const auto& c : chosen) {
    notes.push_back("channel " + c.second + ": chosen for " + c.first + " tensors (" +
                    priorities(*find(ours.channels, c.second), *find(hello.channels, c.second)) + ")");
  }

  wire::Welcome welcome;
  welcome.contextName = context_->options().name();
  welcome.transport = bestTransport;
  for (const auto& c : chosen) {
    welcome.channels.emplace_back(c.first, c.second);
    channels_[c.first] = c.second;
    auto entry = context_->channel(c.second);
    if (!entry) continue;
    caf::anon_send(actor_, watch_atom::value, entry->actor);
    if (entry->context->makesEndpoints() && !endpoints_.count(c.second)) {
      std::string setup;
      Error error;
      auto endpoint = entry->context->acceptEndpoint(setup, error);
      if (!endpoint) {
        return reject("channel '" + c.second + "' cannot serve this pipe: " + error.what());
      }
      endpoint->attach(*loop_);
      endpoints_[c.second] = std::move(endpoint);
      welcome.setups.emplace_back(c.second, setup);
    }
  }
  bool moving = bestTransport != transport_->name;
  if (moving) {
    joinToken_ = registry_->expect(weak_from_this());
    welcome.address = registry_->addresses().at(bestTransport);
    welcome.joinToken = joinToken_;
  }
  welcome.notes = notes;
  notes_ = std::move(notes);
  auto frame = std::make_shared<std::string>(frameOf(wire::FrameType::kWelcome, welcome));
  auto self = shared_from_this();
  connection_->write(frame->data(), frame->size(), [self, frame](const Error& e) {
    if (e && self->state_ != State::kEstablished) self->fail(e);
  });
  if (moving) {
    state_ = State::kAwaitingJoin;
    // Nothing else holds the pipe until its connector joins: the timer does
    // (cancelling it, on join or failure, lets go).
    std::string target = bestTransport;
    joinTimer_ = loop_->after(kJoinTimeout, [self, target] {
      self->fail(ACTORPIPE_ERROR(NegotiationError, "the peer did not join over " + target + " in time"));
    });
    return;
  }
  establish();
}

void PipeCore::adoptJoin(std::shared_ptr<const TransportEntry> transport,
                         std::shared_ptr<transport::Connection> connection) {
  if (state_ != State::kAwaitingJoin || error_) {
    connection->close(ACTORPIPE_ERROR(ProtocolError, "unexpected join"));
    return;
  }
  loop_->cancel(joinTimer_);
  // The first connection has done its job (it carried the welcome).
  connection_->close(ACTORPIPE_ERROR(PipeClosedError));
  connection_ = std::move(connection);
  transport_ = std::move(transport);
  establish();
}

// Tell the peer why, so both sides fail with the same reason; close only
// once the reject is on the wire (closing first would cancel it).
void PipeCore::reject(const std::string& reason) {
  ACTORPIPE_LOG(kInfo, "pipe " << id_ << ": rejecting the peer: " << reason);
  state_ = State::kClosed;
  auto frame = std::make_shared<std::string>(frameOf(wire::FrameType::kReject, wire::Reject{reason, wire::Reject::kNegotiation}));
  auto self = shared_from_this();
  connection_->write(frame->data(), frame->size(), [self, frame, reason](const Error&) {
    self->fail(ACTORPIPE_ERROR(NegotiationError, reason));
  });
}

void PipeCore::establish() {
  state_ = State::kEstablished;
  disarm(handshakeTimer_);
  std::weak_ptr<PipeCore> weak = shared_from_this();
  connection_->onPeerGone([weak](const Error& e) {
    if (auto core = weak.lock()) core->onPeerGone(e);
  });
  connection_->countArrivals(arrivals_);
  std::weak_ptr<transport::Connection> final = connection_;
  for (auto& endpoint : endpoints_) {
    endpoint.second->setPeerProcess([final]() -> std::optional<PeerProcess> {
      auto connection = final.lock();
      return connection ? connection->peerProcess() : std::nullopt;
    });
    endpoint.second->countArrivals(arrivals_);
  }
  {
    std::lock_guard<std::mutex> guard(infoMutex_);
    info_.established = true;
    info_.transport = transport_->name;
    info_.channels = channels_;
    info_.peerAddress = connection_->peerAddress();
    info_.remoteName = remoteName_;
    info_.notes = notes_;
  }
  ACTORPIPE_LOG(kInfo, "pipe " << id_ << ": established with " << url_ << " over " << transport_->name << [&] {
    std::string channels;
    for (const auto& c : channels_) channels += " " + c.first + ":" + c.second;
    return channels.empty() ? std::string(", no channels") : ", channels" + channels;
  }());
  sendUnsent();
  advanceReads();
  if (ready_) {
    auto ready = std::move(ready_);
    ready_ = nullptr;
    ready(Error(), shared_from_this());
  }
}

} // namespace actorpipe::detail
