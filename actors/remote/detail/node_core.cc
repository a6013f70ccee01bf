// The node: published names, exported actors, the listener and the
// liveness ticker. Links are in link.cc.
#include <actorpipe/actors/remote/detail/node_core.h>

#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include <caf/actor_cast.hpp>
#include <caf/actor_registry.hpp>
#include <caf/attachable.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/runtime/detail/log.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/detail/secure_random.h>
#include <actorpipe/transports/shm/socket.h>

namespace actorpipe::remote::detail {
namespace {

// Boot, network namespace, process and a nonce: unique per Node, whatever
// the host is called (containers often share a name).
std::string makeIdentity() {
  std::string host = transport::shm::hostIdentity();
  for (char& c : host) {
    if (c <= ' ' || c > '~') c = '_';
  }
  return host + "/pid:" + std::to_string(::getpid()) + "/" + actorpipe::detail::secureRandomHex(8);
}

std::shared_ptr<Context> makeContext(caf::actor_system& system, const NodeOptions& options,
                                     const std::string& identity) {
  Limits limits;
  limits.maxPayloadSize = options.maxMessageBytes;
  limits.maxTensorSize = options.maxTensorBytes;
  limits.maxEntries = options.maxTensors + 1;
  auto context = std::make_shared<Context>(ContextOptions()
                                               .name(identity)
                                               .actorSystem(system)
                                               .secret(options.secret)
                                               .limits(limits));
  registerDefaultBackends(*context, options.backends);
  return context;
}

} // namespace

NodeCore::NodeCore(caf::actor_system& system, NodeOptions options)
    : system_(system),
      options_(std::move(options)),
      identity_(makeIdentity()),
      // Large received tensors' memory, reused: up to one window of it.
      pool_(std::make_shared<BufferPool>(options_.windowBytes, size_t{1} << 20)),
      context_(makeContext(system_, options_, identity_)) {}

void NodeCore::start() {
  listener_ = context_->listen(options_.listen);
  for (const auto& url : options_.listen) {
    std::string scheme = url.substr(0, url.find("://"));
    if (listener_->url(scheme).empty()) {
      throw std::runtime_error("actorpipe node cannot listen at " + url);
    }
  }
  acceptNext();
  ticker_ = std::thread([self = shared_from_this()] { self->tick(); });
}

std::string NodeCore::url(const std::string& transport) const {
  return listener_ ? listener_->url(transport) : std::string();
}

std::vector<std::string> NodeCore::urls() const {
  std::vector<std::string> out;
  for (const auto& url : options_.listen) {
    std::string at = this->url(url.substr(0, url.find("://")));
    // A wildcard address is where this node listens, not where others
    // reach it: not said (a node that should be introduced listens on the
    // address its peers reach it at, as a World's nodes do).
    if (at.rfind("tcp://0.0.0.0:", 0) == 0 || at.rfind("tcp://[::]:", 0) == 0) continue;
    if (!at.empty() && isPlainName(at, kMaxUrlLength) && out.size() < kMaxUrls &&
        std::find(out.begin(), out.end(), at) == out.end()) {
      out.push_back(std::move(at));
    }
  }
  return out;
}

bool NodeCore::post(std::function<void()> fn) {
  return context_->core()->loop().post([fn = std::move(fn)] { fn(); });
}

void NodeCore::acceptNext() {
  std::weak_ptr<NodeCore> weak = shared_from_this();
  listener_->accept([weak](const Error& error, std::shared_ptr<Pipe> pipe) {
    auto self = weak.lock();
    if (!self) return;
    if (error) {
      ACTORPIPE_LOG(kInfo, "node " << self->identity_ << " stops accepting: " << error.what());
      return;
    }
    auto link = std::make_shared<Link>(self, std::move(pipe), std::string());
    {
      std::lock_guard<std::mutex> guard(self->mutex_);
      if (self->leaving_) return;  // the pipe closes with its last reference
      self->links_.insert(link);
    }
    link->start();
    self->acceptNext();
  });
}

std::shared_ptr<Link> NodeCore::linkTo(const std::string& url) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (leaving_) return nullptr;
    auto it = byUrl_.find(url);
    if (it != byUrl_.end()) {
      link = it->second.lock();
      if (link && !link->dead()) return link;
    }
    link = std::make_shared<Link>(shared_from_this(), context_->connect(url), url);
    byUrl_[url] = link;
    links_.insert(link);
  }
  link->start();
  return link;
}

std::shared_ptr<Link> NodeCore::linkToNode(const caf::node_id& nid) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (const auto& link : links_) {
    if (!link->dead() && link->peerNodeId() == nid) return link;
  }
  return nullptr;
}

void NodeCore::linkClosed(const std::shared_ptr<Link>& link) {
  std::lock_guard<std::mutex> guard(mutex_);
  links_.erase(link);
  auto it = byUrl_.find(link->url());
  if (it != byUrl_.end() && it->second.lock() == link) byUrl_.erase(it);
  tickWake_.notify_all();  // leave() may be waiting for the last one
}

std::vector<std::string> NodeCore::peers() {
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    links.assign(links_.begin(), links_.end());
  }
  std::vector<std::string> out;
  for (auto& link : links) {
    std::string peer = link->peerIdentity();
    if (!peer.empty() && !link->dead()) out.push_back(peer);
  }
  return out;
}

std::vector<LinkStats> NodeCore::stats() {
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    links.assign(links_.begin(), links_.end());
  }
  std::vector<LinkStats> out;
  for (auto& link : links) out.push_back(link->stats());
  return out;
}

Error NodeCore::publish(caf::strong_actor_ptr actor, std::set<std::string> interface,
                        const std::string& name) {
  if (!actor) return ACTORPIPE_ERROR(LogicError, "publish: an invalid actor handle");
  if (!isPlainName(name, kMaxNameLength)) {
    return ACTORPIPE_ERROR(LogicError, "publish: '" + name +
                                           "' is not a name (printable, no spaces, 1-255 bytes)");
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    published_[name] = Published{actor, std::vector<std::string>(interface.begin(), interface.end())};
  }
  exportActor(actor);
  return Error();
}

void NodeCore::unpublish(const std::string& name, const caf::strong_actor_ptr& only) {
  caf::strong_actor_ptr released;  // let go outside the lock
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = published_.find(name);
  if (it == published_.end() || (only && it->second.actor != only)) return;
  released = std::move(it->second.actor);
  published_.erase(it);
}

caf::strong_actor_ptr NodeCore::published(const std::string& name,
                                          std::vector<std::string>& interface) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = published_.find(name);
  if (it == published_.end()) return nullptr;
  interface = it->second.interface;
  return it->second.actor;
}

void NodeCore::exportActor(const caf::strong_actor_ptr& actor) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // try_emplace: on every send from a known sender, no node is made.
    auto inserted = exported_.try_emplace(actor->id(), actor.get());
    if (!inserted.second) return;
  }
  caf::actor_id aid = actor->id();
  // CAF reads a handle of this node's actor (one a peer got from us and
  // sends back, inside a message) from its registry, which holds the actor
  // until it ends, or until this node leaves (CAF's middleman registers
  // every handle it sends the same way).
  system_.registry().put(aid, actor);
  // Outside the lock: attaching to an actor that already ended runs the
  // functor here and now.
  std::weak_ptr<NodeCore> weak = shared_from_this();
  actor->get()->attach_functor([weak, aid](const caf::error& reason) {
    if (auto self = weak.lock()) self->onLocalDown(aid, reason);
  });
}

caf::strong_actor_ptr NodeCore::exported(caf::actor_id aid) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = exported_.find(aid);
  return it == exported_.end() ? nullptr : it->second.lock();
}

void NodeCore::onLocalDown(caf::actor_id aid, const caf::error& reason) {
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    links.assign(links_.begin(), links_.end());
  }
  // The DOWN first, then forget the actor: a LINK read meanwhile still
  // finds it (CAF answers it with the actor's reason), and one read after
  // gets its "gone" DOWN behind this one, not before it with reason unknown.
  for (auto& link : links) link->sendDown(aid, reason);
  std::lock_guard<std::mutex> guard(mutex_);
  exported_.erase(aid);
}

void NodeCore::tick() {
  auto interval = options_.heartbeatInterval;
  auto step = std::max(std::chrono::milliseconds(10), std::min(interval, options_.heartbeatTimeout) / 4);
  std::unique_lock<std::mutex> lock(tickMutex_);
  while (!stopTicker_) {
    tickWake_.wait_for(lock, step);
    if (stopTicker_) break;
    lock.unlock();
    std::vector<std::shared_ptr<Link>> links;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      links.assign(links_.begin(), links_.end());
    }
    auto now = Link::Clock::now();
    for (auto& link : links) link->tick(now, interval, options_.heartbeatTimeout);
    lock.lock();
  }
}

void NodeCore::endOnLeave(caf::strong_actor_ptr actor) {
  if (!actor) return;
  bool now = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    now = leaving_;
    if (!now) {
      // Those already gone are dropped: exports come and go.
      endOnLeave_.erase(std::remove_if(endOnLeave_.begin(), endOnLeave_.end(),
                                       [](const caf::weak_actor_ptr& w) { return !w.lock(); }),
                        endOnLeave_.end());
      endOnLeave_.emplace_back(actor.get());
    }
  }
  if (now) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

void NodeCore::leave() {
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (leaving_) return;
    leaving_ = true;
    links.assign(links_.begin(), links_.end());
  }
  for (auto& link : links) link->leave();
  // Each link ends once its BYE is written (or cannot be): give them a
  // moment, then close whatever is left.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& link : links) {
    while (!link->dead() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    link->fail(makeError(RemoteError::kNodeLeft, "this node left"));
  }
  {
    std::lock_guard<std::mutex> guard(tickMutex_);
    stopTicker_ = true;
  }
  tickWake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  context_->join();
  std::map<std::string, Published> published;
  std::map<caf::actor_id, caf::weak_actor_ptr> exported;
  std::set<std::shared_ptr<Link>> remaining;
  std::vector<caf::weak_actor_ptr> ours;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    published.swap(published_);
    exported.swap(exported_);
    remaining.swap(links_);
    ours.swap(endOnLeave_);
    byUrl_.clear();
  }
  // The registry held them for peers; without peers their lives are their
  // own again (an actor nobody holds ends, as it would have without us).
  for (auto& entry : exported) system_.registry().erase(entry.first);
  for (auto& weak : ours) {
    if (auto actor = weak.lock()) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
}

} // namespace actorpipe::remote::detail
