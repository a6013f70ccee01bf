#include <actorpipe/actors/remote/client_server.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <caf/actor_cast.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <actorpipe/actors/dataflow/actor_io.h>
#include <actorpipe/actors/dataflow/channel.h>
#include <actorpipe/actors/remote/detail/handoff.h>
#include <actorpipe/actors/remote/detail/parked.h>
#include <actorpipe/actors/remote/detail/peer_exits.h>
#include <actorpipe/actors/remote/node.h>

// The protocol, between a client's two actors and the server's:
//   client (its scoped actor)    -> server actor: (cshello, agent) -> id
//   client (scoped actor, agent) -> server actor: (csmsg, message) -> bool
//   server (a scoped actor/send) -> client agent: (csmsg, message) -> bool
// A client's send without a timeout asks from its scoped actor, on the
// calling thread; one with a timeout has its agent ask (an event-based
// actor drops an answer that comes after its request timed out, where the
// scoped actor would keep it in its mailbox for ever, one per timed-out
// send). The agent takes its client's calls on CAF's scheduler (a free
// worker thread), and skips one whose deadline has passed: a call given up
// is never sent late, behind a later send.
// A message is answered once it is queued at the receiver (true) or its
// queue is closed (false); a full queue parks the answer, which is the
// backpressure. The server hears a client only from the sender that said
// hello and the agent it named, and takes as its agent only an actor of
// that sender's node that is no other client's sender or agent; a
// client's agent hears only actors of the server's node (the peer the
// client chose; the agent's handle went there only). A "node" is a link
// here (peerLinkOf), and a client's sender and agent are known by their
// handles, not by the node id a peer states. Each Server::send asks
// from a scoped actor of its own, so a client slow to answer holds up only
// the sends to it. Each side monitors the other's actor that lives as long
// as the other object (the agent; the server actor) and closes that peer's
// queue when it goes, after storing why.
namespace actorpipe::remote {

namespace {

using cs_hello_atom = caf::atom_constant<caf::atom("cshello")>;
using cs_message_atom = caf::atom_constant<caf::atom("csmsg")>;

using Inbox = dataflow::Channel<caf::message>;
using dataflow::Status;

// Clients gone and not yet told (by receive or receiveAny) that are kept:
// past this the oldest is forgotten, so clients that come and go while the
// server never receives cannot grow the table without bound.
constexpr size_t kMaxGoneKept = 1024;

// A peer's sends parked for room in one queue: an honest peer has one (its
// sends are made one at a time); a peer that asks from many threads is cut
// off here rather than holding a response promise per message.
constexpr size_t kMaxWaitingSends = 16;

std::string publishedName(const std::string& name) { return "clientserver:" + name; }

// An actor's handle, the key it is known by here (its address compares by
// id and node, which a peer may claim).
const caf::actor_control_block* blockOf(const caf::actor& actor) {
  return caf::actor_cast<caf::actor_control_block*>(actor);
}

// Why `who` is gone, from its actor's exit reason: the node layer's error
// as it is (it names the node and the cause), else kClosed.
caf::error goneError(caf::actor_system& system, const std::string& who, const caf::error& reason) {
  if (isError(reason, RemoteError::kNodeLost) || isError(reason, RemoteError::kNodeLeft)) {
    auto code = isError(reason, RemoteError::kNodeLost) ? RemoteError::kNodeLost : RemoteError::kNodeLeft;
    return makeError(code, who + ": " + system.render(reason));
  }
  return makeError(RemoteError::kClosed, who + " closed");
}

caf::error timedOut(const std::string& what) {
  return caf::make_error(caf::sec::request_timeout, what + ": nothing came in time");
}

// Past a year is for ever (and keeps now + timeout from overflowing).
std::chrono::steady_clock::time_point deadlineOf(Timeout timeout) {
  if (timeout > std::chrono::hours(24 * 365)) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + timeout;
}

// One received message from `inbox`, waiting until `deadline`.
dataflow::ReadResult<caf::message> readUntil(const Inbox& inbox,
                                             std::chrono::steady_clock::time_point deadline) {
  if (deadline == std::chrono::steady_clock::time_point::max()) return inbox.read();
  auto left = deadline - std::chrono::steady_clock::now();
  return inbox.readFor(std::max(left, decltype(left)::zero()));
}

// One holder at a time, waited for until a deadline. Not a timed_mutex:
// its try_lock_until is pthread_mutex_clocklock, which GCC 12's TSan does
// not intercept (it then reports every unlock as one of an unlocked mutex).
class Turn {
 public:
  bool take(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> guard(mutex_);
    auto free = [&] { return !busy_; };
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(guard, free);
    } else if (!cv_.wait_until(guard, deadline, free)) {
      return false;
    }
    busy_ = true;
    return true;
  }
  void give() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      busy_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool busy_ = false;
};

caf::error closedError(const std::string& who) { return makeError(RemoteError::kClosed, who + " closed"); }

// Asks `to` to take `message`, from a scoped actor of the caller's own:
// sends to different peers never wait for each other. kClosed if its
// queue was closed.
caf::error sendThrough(caf::scoped_actor& self, const caf::actor& to, caf::message message,
                       Timeout timeout, const std::string& who) {
  caf::error result;
  auto answered = [&](bool queued) {
    if (!queued) result = closedError(who);
  };
  auto failed = [&](caf::error& error) { result = std::move(error); };
  auto deadline = deadlineOf(timeout);
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    self->request(to, caf::infinite, cs_message_atom::value, std::move(message)).receive(answered, failed);
  } else {
    auto left = std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(),
                                                              std::chrono::milliseconds(1));
    self->request(to, std::chrono::duration_cast<Timeout>(left), cs_message_atom::value, std::move(message))
        .receive(answered, failed);
  }
  return result;
}

} // namespace

namespace detail {

struct ServerShared {
  ServerShared(Node& n, std::string nm, ClientServerOptions o)
      : node(n), system(n.system()), name(std::move(nm)), options(o) {}

  struct Entry {
    // Its sends come from this actor, or its agent; ours go to the agent.
    // Both held: their handles are their keys in bySender.
    caf::strong_actor_ptr sender;
    caf::actor agent;
    uint64_t peer = 0;  // its link (peerLinkOf), whose clients it counts as
    Inbox inbox;
    size_t waiting = 0;  // its sends parked for room (the server actor's)
    caf::error gone;     // why it left; none while connected
    // Server::send's to it, one at a time: however many threads send, at
    // most one waits at its agent (which bounds what it parks, as ours does).
    std::shared_ptr<Turn> sending = std::make_shared<Turn>();
  };

  Node& node;
  caf::actor_system& system;
  const std::string name;
  const ClientServerOptions options;

  mutable std::mutex mutex;
  std::condition_variable changed;  // a client came or went
  std::map<int, Entry> clients;     // a gone one stays until its loss is told
  // By handle, not by address: CAF compares addresses by actor id and node
  // id, and a peer with the secret may claim an honest node's id (its actor
  // of a client's sender's id would send as that client).
  std::map<const caf::actor_control_block*, int> bySender;
  std::map<uint64_t, size_t> perNode;  // clients of each peer (link)
  std::vector<std::shared_ptr<dataflow::detail::Signal>> watchers;  // receiveAny's
  uint64_t generation = 0;  // bumped whenever `clients` changes
  size_t goneKept = 0;  // entries of `clients` that are gone
  int nextId = 0;
  int lastServed = -1;
  bool closed = false;
  caf::actor actor;

  // Scoped actors Server::send asks from, one per concurrent send and kept
  // for the next: a sender new to a client's node costs that node a proxy
  // (and both a DOWN at its end), a round trip's worth several times over.
  std::mutex senderMutex;
  std::vector<std::unique_ptr<caf::scoped_actor>> idleSenders;

  std::unique_ptr<caf::scoped_actor> takeSender() {
    {
      std::lock_guard<std::mutex> guard(senderMutex);
      if (!idleSenders.empty()) {
        auto sender = std::move(idleSenders.back());
        idleSenders.pop_back();
        return sender;
      }
    }
    return std::make_unique<caf::scoped_actor>(system);
  }
  // A sender whose request timed out is not kept: the late answer would
  // wait in its mailbox.
  void giveBack(std::unique_ptr<caf::scoped_actor> sender, const caf::error& error) {
    if (error == caf::sec::request_timeout) return;
    std::lock_guard<std::mutex> guard(senderMutex);
    idleSenders.push_back(std::move(sender));
  }

  // Under `mutex`.
  void membershipChangedLocked() {
    ++generation;
    changed.notify_all();
    for (auto& signal : watchers) signal->raise();
  }

  void left(const caf::actor_control_block* agent, const caf::error& reason) {
    std::lock_guard<std::mutex> guard(mutex);
    for (auto& [id, entry] : clients) {
      if (entry.gone || blockOf(entry.agent) != agent) continue;
      entry.gone = goneError(system, "client " + std::to_string(id), reason);
      entry.inbox.close();
      bySender.erase(entry.sender.get());
      bySender.erase(agent);
      // It still counts against its node's clients (its queue is still
      // held) until its loss is told or it is forgotten.
      ++goneKept;
      forgetOldestGoneLocked(id);
      membershipChangedLocked();
      return;
    }
  }

  // Under `mutex`; `clients` is in id order, so the first gone is the
  // oldest. `keep` (the one that just left) is not forgotten.
  void forgetOldestGoneLocked(int keep) {
    for (auto it = clients.begin(); goneKept > kMaxGoneKept && it != clients.end();) {
      if (it->second.gone && it->first != keep) {
        it = eraseGoneLocked(it);
      } else {
        ++it;
      }
    }
  }

  // Under `mutex`: `id`'s loss is told; it is no client any more.
  caf::error tellGoneLocked(std::map<int, Entry>::iterator it) {
    auto gone = it->second.gone;
    eraseGoneLocked(it);
    return gone;
  }

  std::map<int, Entry>::iterator eraseGoneLocked(std::map<int, Entry>::iterator it) {
    // Its keys go with the handles that keep them (left() took them out
    // already, unless the server closed first; a key may be a newer
    // client's since).
    const caf::actor_control_block* keys[] = {it->second.sender.get(), blockOf(it->second.agent)};
    for (const caf::actor_control_block* key : keys) {
      auto found = bySender.find(key);
      if (found != bySender.end() && found->second == it->first) bySender.erase(found);
    }
    auto node = perNode.find(it->second.peer);
    if (node != perNode.end() && --node->second == 0) perNode.erase(node);
    --goneKept;
    return clients.erase(it);
  }
};

struct ClientShared {
  ClientShared(Node& n, ClientServerOptions o)
      : node(n), system(n.system()), options(o), inbox(o.queueMessages), self(system) {}

  Node& node;
  caf::actor_system& system;
  const ClientServerOptions options;
  Inbox inbox;
  int id = -1;
  caf::actor server;
  // Whose actors are heard: the server's link (peerLinkOf), not its node
  // id, which a peer with the secret may claim. Set before the agent starts.
  uint64_t serverLink = 0;
  caf::actor agent;
  size_t waiting = 0;  // the agent's parked answers

  std::mutex mutex;
  caf::error gone;  // why the server is gone; set before `inbox` closes

  std::mutex sendMutex;  // one send at a time
  caf::scoped_actor self;  // asks without a timeout (never left an answer)

  // Why a request the agent never answered failed: the agent ended with
  // the client (kClosed) or with the server's node.
  caf::error goneOr(const std::string& who) {
    std::lock_guard<std::mutex> guard(mutex);
    return gone ? gone : closedError(who);
  }
};

// A client's call waiting for the answer to the request it handed its
// agent. Completed once: by the answer, by the request's error (its
// timeout too), or, should the agent drop the request unanswered (it ended
// first), by the Completer's end.
struct ClientCall {
  std::mutex mutex;
  std::condition_variable done;
  bool answered = false;
  caf::error error;

  void complete(caf::error e) {
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (answered) return;
      answered = true;
      error = std::move(e);
    }
    done.notify_all();
  }
  // Waits for the answer: until `deadline` (the request's own) and a grace
  // for the agent's timer, past which the call gives up.
  caf::error wait(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> guard(mutex);
    if (!done.wait_until(guard, deadline + std::chrono::seconds(5), [&] { return answered; })) {
      return caf::make_error(caf::sec::request_timeout, "no answer from the client's agent");
    }
    return error;
  }
};

// Travels with the request to the agent and on into its response handlers.
struct Completer {
  Completer(std::shared_ptr<ClientCall> c, std::shared_ptr<ClientShared> s, caf::message m,
            std::chrono::steady_clock::time_point d)
      : call(std::move(c)), shared(std::move(s)), message(std::move(m)), deadline(d) {}
  ~Completer() { call->complete(shared->goneOr("the server")); }  // no-op once answered
  std::shared_ptr<ClientCall> call;
  std::shared_ptr<ClientShared> shared;
  caf::message message;  // for the server
  std::chrono::steady_clock::time_point deadline;  // finite
};

} // namespace detail

} // namespace actorpipe::remote

// Local only: the agent's calls from its own client (no wire form).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<actorpipe::remote::detail::Completer>)

namespace actorpipe::remote {

namespace {

caf::behavior serverActor(caf::event_based_actor* self, std::shared_ptr<detail::ServerShared> shared) {
  self->set_down_handler([shared](caf::down_msg& down) { shared->left(down.source.get(), down.reason); });
  detail::serveEveryNode(self);
  return {
      [self, shared](cs_hello_atom, caf::actor& agent) {
        // Before the promise, which takes the sender out of the message.
        auto sender = self->current_sender();
        auto promise = self->make_response_promise<int32_t>();
        std::unique_lock<std::mutex> guard(shared->mutex);
        auto refuse = [&](const std::string& why) {
          guard.unlock();
          promise.deliver(caf::make_error(caf::sec::invalid_argument, why));
          return promise;
        };
        if (shared->closed) return refuse("the server is closed");
        if (!sender || !agent) return refuse("a hello without its sender or agent");
        // Its agent is its own node's: a peer cannot have the server send
        // what it meant for it to another node's client.
        // (Its link's: one node's actors all come on it.)
        uint64_t peer = detail::peerLinkOf(sender);
        if (detail::peerLinkOf(caf::actor_cast<caf::strong_actor_ptr>(agent)) != peer)
          return refuse("a hello naming another node's actor");
        if (shared->bySender.count(sender.get())) return refuse("this sender is a client's already");
        if (shared->bySender.count(blockOf(agent))) return refuse("this agent is another client's");
        size_t& count = shared->perNode[peer];
        if (count >= shared->options.maxClientsPerNode) {
          if (count == 0) shared->perNode.erase(peer);
          return refuse("too many clients of one node at this server (maxClientsPerNode)");
        }
        ++count;
        int id = shared->nextId++;
        auto& entry = shared->clients[id];
        entry.sender = sender;
        entry.agent = agent;
        entry.peer = peer;
        entry.inbox = Inbox(shared->options.queueMessages);
        // Its sends come from the sender, or (a send with a timeout) from
        // its agent.
        shared->bySender[sender.get()] = id;
        shared->bySender[blockOf(agent)] = id;
        shared->membershipChangedLocked();
        guard.unlock();
        // The agent lives as long as the client: its end, or its node's,
        // is the client's.
        self->monitor(agent);
        promise.deliver(int32_t(id));
        return promise;
      },
      [self, shared](cs_message_atom, caf::message& message) {
        auto sender = self->current_sender();
        auto promise = self->make_response_promise<bool>();
        std::unique_lock<std::mutex> guard(shared->mutex);
        auto it = sender ? shared->bySender.find(sender.get()) : shared->bySender.end();
        if (it == shared->bySender.end()) {
          guard.unlock();
          promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                          "not a client of this server (no hello from this sender)"));
          return promise;
        }
        int id = it->second;
        auto found = shared->clients.find(id);
        if (found == shared->clients.end()) {  // (not while bySender has it)
          guard.unlock();
          promise.deliver(false);
          return promise;
        }
        auto& entry = found->second;
        if (entry.waiting >= kMaxWaitingSends) {
          guard.unlock();
          promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                          "too many sends of one client waiting for room"));
          return promise;
        }
        ++entry.waiting;
        Inbox inbox = entry.inbox;
        guard.unlock();
        auto pending = promise;
        dataflow::writeThen(self, inbox, std::move(message),
                            [shared, id, pending](Status status) mutable {
                              {
                                std::lock_guard<std::mutex> guard(shared->mutex);
                                auto found = shared->clients.find(id);
                                if (found != shared->clients.end()) --found->second.waiting;
                              }
                              pending.deliver(status == Status::kOpen);
                            });
        return promise;
      },
  };
}

caf::behavior clientAgent(caf::event_based_actor* self, std::shared_ptr<detail::ClientShared> shared) {
  // Exported once it asks the server: any peer can address it, and its
  // end would leave its Client waiting, untold.
  detail::serveEveryNode(self);
  self->monitor(shared->server);
  self->set_down_handler([shared](caf::down_msg& down) {
    {
      std::lock_guard<std::mutex> guard(shared->mutex);
      if (!shared->gone) shared->gone = goneError(shared->system, "the server", down.reason);
    }
    shared->inbox.close();
  });
  return {
      // From this client's own calls (a type no peer can send: it has no
      // wire form): asks the server, answers the call.
      [self, shared](std::shared_ptr<detail::Completer>& completer) {
        auto left = std::chrono::duration_cast<Timeout>(completer->deadline - std::chrono::steady_clock::now());
        if (left <= Timeout(0)) {  // the caller has given up, or is about to: not sent
          completer->call->complete(timedOut("send to the server"));
          return;
        }
        self->request(shared->server, caf::duration(left), cs_message_atom::value,
                      std::move(completer->message))
            .then(
                [completer](bool queued) {
                  completer->call->complete(queued ? caf::error() : closedError("the server"));
                },
                [completer](caf::error& error) { completer->call->complete(std::move(error)); });
      },
      [self, shared](cs_message_atom, caf::message& message) {
        auto sender = self->current_sender();
        auto promise = self->make_response_promise<bool>();
        // The server's node is the peer this client trusts (it chose it,
        // and the agent's handle went there only): its actors may send.
        bool fromServer = sender && detail::peerLinkOf(sender) == shared->serverLink;
        if (!fromServer || shared->waiting >= kMaxWaitingSends) {
          promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                          fromServer ? "too many sends waiting for room"
                                                     : "only the server's node sends to a client"));
          return promise;
        }
        ++shared->waiting;  // only this actor touches it
        auto pending = promise;
        dataflow::writeThen(self, shared->inbox, std::move(message), [shared, pending](Status status) mutable {
          --shared->waiting;
          pending.deliver(status == Status::kOpen);
        });
        return promise;
      },
  };
}

} // namespace

// -- Server -------------------------------------------------------------------

caf::expected<std::unique_ptr<Server>> Server::create(Node& node, const std::string& name,
                                                      ClientServerOptions options) {
  if (options.queueMessages == 0 || options.maxClientsPerNode == 0) {
    return caf::make_error(caf::sec::invalid_argument,
                           "queueMessages and maxClientsPerNode must be at least 1");
  }
  std::unique_ptr<Server> server(new Server());
  server->shared_ = std::make_shared<detail::ServerShared>(node, name, options);
  auto& shared = server->shared_;
  shared->actor = node.system().spawn(serverActor, shared);
  // Its handlers never block (a full queue parks the answer).
  node.runOnLoop(shared->actor);
  node.endOnLeave(shared->actor);
  if (auto error = node.publish(shared->actor, publishedName(name))) {
    caf::anon_send_exit(shared->actor, caf::exit_reason::user_shutdown);
    return caf::make_error(caf::sec::invalid_argument, error.what());
  }
  return server;
}

Server::~Server() { close(); }

void Server::close() {
  if (!shared_) return;
  {
    std::lock_guard<std::mutex> guard(shared_->mutex);
    if (shared_->closed) return;
    shared_->closed = true;
    for (auto& [id, entry] : shared_->clients) {
      if (!entry.gone) {
        entry.gone = makeError(RemoteError::kClosed, "this server closed");
        ++shared_->goneKept;
      }
      entry.inbox.close();
    }
    shared_->membershipChangedLocked();
  }
  shared_->node.unpublish(publishedName(shared_->name), shared_->actor);
  caf::anon_send_exit(shared_->actor, caf::exit_reason::user_shutdown);
}

caf::error Server::waitForClients(size_t count, Timeout timeout) {
  auto deadline = deadlineOf(timeout);
  std::unique_lock<std::mutex> guard(shared_->mutex);
  auto enough = [&] {
    if (shared_->closed) return true;
    size_t connected = 0;
    for (auto& [id, entry] : shared_->clients) connected += entry.gone ? 0 : 1;
    return connected >= count;
  };
  if (!shared_->changed.wait_until(guard, deadline, enough)) return timedOut("waitForClients");
  if (shared_->closed) return makeError(RemoteError::kClosed, "this server closed");
  return {};
}

std::vector<int> Server::clients() const {
  std::vector<int> ids;
  std::lock_guard<std::mutex> guard(shared_->mutex);
  for (auto& [id, entry] : shared_->clients)
    if (!entry.gone) ids.push_back(id);
  return ids;
}

caf::error Server::send(int client, caf::message message, Timeout timeout) {
  auto deadline = deadlineOf(timeout);
  caf::actor agent;
  std::shared_ptr<Turn> sending;
  {
    std::lock_guard<std::mutex> guard(shared_->mutex);
    auto it = shared_->clients.find(client);
    if (it == shared_->clients.end())
      return caf::make_error(caf::sec::invalid_argument, "no client " + std::to_string(client));
    if (it->second.gone) return it->second.gone;
    agent = it->second.agent;
    sending = it->second.sending;
  }
  if (!sending->take(deadline)) return timedOut("send to client " + std::to_string(client));
  struct Give {
    Turn& turn;
    ~Give() { turn.give(); }
  } give{*sending};
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    timeout = std::max(std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now()),
                       Timeout(1));
  }
  auto sender = shared_->takeSender();
  auto error = sendThrough(*sender, agent, std::move(message), timeout, "client " + std::to_string(client));
  shared_->giveBack(std::move(sender), error);
  return error;
}

caf::error Server::broadcast(const caf::message& message, Timeout timeout) {
  auto deadline = deadlineOf(timeout);
  caf::error first;
  for (int id : clients()) {
    auto left = deadline == std::chrono::steady_clock::time_point::max()
                    ? kForever
                    : std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now());
    auto error = send(id, message, std::max(left, Timeout(1)));
    if (error && !first) first = std::move(error);
  }
  return first;
}

caf::error Server::receive(int client, caf::message& message, Timeout timeout) {
  Inbox inbox;
  {
    std::lock_guard<std::mutex> guard(shared_->mutex);
    auto it = shared_->clients.find(client);
    if (it == shared_->clients.end())
      return caf::make_error(caf::sec::invalid_argument, "no client " + std::to_string(client));
    inbox = it->second.inbox;
  }
  auto read = readUntil(inbox, deadlineOf(timeout));
  if (read.item) {
    detail::acquireHandoff();
    message = std::move(*read.item);
    return {};
  }
  if (read.status != Status::kDrained) return timedOut("receive from client " + std::to_string(client));
  std::lock_guard<std::mutex> guard(shared_->mutex);
  auto it = shared_->clients.find(client);
  if (it == shared_->clients.end())
    return caf::make_error(caf::sec::invalid_argument, "no client " + std::to_string(client));
  return shared_->tellGoneLocked(it);
}

caf::error Server::receiveAny(int& client, caf::message& message, Timeout timeout) {
  auto deadline = deadlineOf(timeout);
  bool lastLook = false;
  for (;;) {
    std::vector<std::pair<int, Inbox>> order;
    uint64_t generation;
    {
      std::lock_guard<std::mutex> guard(shared_->mutex);
      if (shared_->closed) return makeError(RemoteError::kClosed, "this server closed");
      generation = shared_->generation;
      // In turn, starting after the client served last.
      for (auto& [id, entry] : shared_->clients)
        if (id > shared_->lastServed) order.emplace_back(id, entry.inbox);
      for (auto& [id, entry] : shared_->clients)
        if (id <= shared_->lastServed) order.emplace_back(id, entry.inbox);
    }
    for (auto& [id, inbox] : order) {
      auto read = inbox.tryRead();
      if (read.item) {
        detail::acquireHandoff();
        std::lock_guard<std::mutex> guard(shared_->mutex);
        shared_->lastServed = id;
        client = id;
        message = std::move(*read.item);
        return {};
      }
      if (read.status == Status::kDrained) {
        // A client gone, everything it sent taken: told once, then left out.
        std::lock_guard<std::mutex> guard(shared_->mutex);
        auto it = shared_->clients.find(id);
        if (it == shared_->clients.end()) continue;
        client = id;
        return shared_->tellGoneLocked(it);
      }
    }
    if (lastLook) return timedOut("receiveAny");
    // Nothing yet: sleep until a queue is written or closed, or a client
    // comes or goes.
    auto signal = std::make_shared<dataflow::detail::Signal>();
    bool ready = false;
    for (auto& [id, inbox] : order) ready = inbox.state()->watch(signal) || ready;
    {
      std::lock_guard<std::mutex> guard(shared_->mutex);
      shared_->watchers.push_back(signal);
      ready = ready || shared_->generation != generation;
    }
    // A queue closed between its read above and its watch raised nothing.
    for (auto& [id, inbox] : order) ready = ready || inbox.status() == Status::kDrained;
    bool timedOutNow = false;
    if (!ready) {
      if (deadline == std::chrono::steady_clock::time_point::max()) {
        signal->wait();
      } else {
        timedOutNow = !signal->wait_until(deadline);
      }
    }
    for (auto& [id, inbox] : order) inbox.state()->unwatch(signal);
    {
      std::lock_guard<std::mutex> guard(shared_->mutex);
      auto& watchers = shared_->watchers;
      watchers.erase(std::remove(watchers.begin(), watchers.end(), signal), watchers.end());
    }
    // Timed out: one last look, so a message that came with the deadline
    // is taken.
    lastLook = timedOutNow;
  }
}

// -- Client -------------------------------------------------------------------

namespace {

// Has the client's agent ask the server to take `message` within a finite
// `timeout`, and waits for the answer.
caf::error sendThroughAgent(const std::shared_ptr<detail::ClientShared>& shared, caf::message message,
                            Timeout timeout) {
  auto call = std::make_shared<detail::ClientCall>();
  auto deadline = deadlineOf(std::max(timeout, Timeout(1)));
  caf::anon_send(shared->agent, std::make_shared<detail::Completer>(call, shared, std::move(message), deadline));
  return call->wait(deadline);
}

} // namespace


caf::expected<std::unique_ptr<Client>> Client::connect(Node& node, const std::string& url,
                                                       const std::string& name, Timeout retryFor,
                                                       ClientServerOptions options) {
  if (options.queueMessages == 0)
    return caf::make_error(caf::sec::invalid_argument, "queueMessages must be at least 1");
  auto deadline = deadlineOf(retryFor);
  caf::expected<caf::actor> server = caf::make_error(caf::sec::invalid_argument, "not looked up");
  for (;;) {
    server = node.remoteActor(url, publishedName(name));
    if (server || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!server) return std::move(server.error());
  std::unique_ptr<Client> client(new Client());
  client->shared_ = std::make_shared<detail::ClientShared>(node, options);
  auto& shared = client->shared_;
  shared->server = std::move(*server);
  shared->serverLink = detail::peerLinkOf(caf::actor_cast<caf::strong_actor_ptr>(shared->server));
  shared->agent = node.system().spawn(clientAgent, shared);
  node.runOnLoop(shared->agent);
  node.endOnLeave(shared->agent);
  // A server that takes no hello within the retry time (at least a
  // second) is not there.
  auto helloFor = std::chrono::duration_cast<Timeout>(std::max<std::chrono::steady_clock::duration>(
      deadline - std::chrono::steady_clock::now(), std::chrono::seconds(1)));
  caf::error failed;
  shared->self->request(shared->server, helloFor, cs_hello_atom::value, shared->agent)
      .receive([&](int32_t id) { shared->id = id; },
               [&](caf::error& error) { failed = std::move(error); });
  if (failed) {
    caf::anon_send_exit(shared->agent, caf::exit_reason::user_shutdown);
    return failed;
  }
  return client;
}

Client::~Client() { close(); }

void Client::close() {
  if (!shared_) return;
  {
    std::lock_guard<std::mutex> guard(shared_->mutex);
    if (!shared_->gone) shared_->gone = makeError(RemoteError::kClosed, "this client closed");
  }
  shared_->inbox.close();
  caf::anon_send_exit(shared_->agent, caf::exit_reason::user_shutdown);
}

int Client::id() const { return shared_->id; }

caf::error Client::send(caf::message message, Timeout timeout) {
  {
    std::lock_guard<std::mutex> guard(shared_->mutex);
    if (shared_->gone) return shared_->gone;
  }
  std::lock_guard<std::mutex> sending(shared_->sendMutex);
  if (deadlineOf(timeout) == std::chrono::steady_clock::time_point::max()) {
    return sendThrough(shared_->self, shared_->server, std::move(message), timeout, "the server");
  }
  return sendThroughAgent(shared_, std::move(message), timeout);
}

caf::error Client::receive(caf::message& message, Timeout timeout) {
  auto read = readUntil(shared_->inbox, deadlineOf(timeout));
  if (read.item) {
    detail::acquireHandoff();
    message = std::move(*read.item);
    return {};
  }
  if (read.status != Status::kDrained) return timedOut("receive from the server");
  std::lock_guard<std::mutex> guard(shared_->mutex);
  return shared_->gone;
}

} // namespace actorpipe::remote
