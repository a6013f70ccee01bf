#pragma once
// Nodes: actors that actors in other processes and on other hosts can reach.
//
// A process joins as a Node: its CAF actor system plus a Context listening
// on `NodeOptions::listen`. It publishes actors under names; another node
// asks for a name at the first node's URL and gets a handle that behaves as
// CAF's remote handles do (send, request(...).then(...), monitor and its
// down_msg):
//
//   caf::actor_system_config cfg;
//   actorpipe::remote::configure(cfg);  // Tensor; add your own types too
//   caf::actor_system system{cfg};
//   actorpipe::remote::Node node(system, options);
//   node.publish(summer, "summer");                     // one process
//   auto summer = node.remoteActor(url, "summer");      // another
//   self->request(*summer, 1s, tensor).then(...);
//
// A message to a remote actor is encoded with CAF's inspection (any type
// registered with add_message_type) and written on the pipe between the two
// nodes; each Tensor in it travels as a pipe tensor on the channel the two
// nodes negotiated (xth, or shm with basic on one host, tcp or mpt across hosts)
// and arrives as a Tensor. Order per sender and receiver is kept: one pipe
// per pair of nodes, read in order.
//
// Liveness: a node writes a BEAT frame when it has written nothing for
// `heartbeatInterval`; a peer from which nothing arrived for
// `heartbeatTimeout` is declared lost (frozen, or the network between is
// cut). A killed peer is noticed at once (its socket closes). Either way
// every request pending to that node fails at once with an error naming the
// node and the cause, and every monitor of its actors gets a down_msg. A
// node that leaves on purpose (leave(), or its Node destroyed) says BYE
// first, and its actors go down with kNodeLeft instead of kNodeLost.
//
// Links work both ways, as CAF's: a local actor linked to a remote one gets
// its exit_msg (its exit reason, or the node's loss), and the remote one
// gets the local one's (LINK and UNLINK frames; the end travels as DOWN).
// Actor handles inside messages travel as with CAF's middleman (a proxy on
// the other node; home again, the actor itself; a third node's actor, a
// proxy on the receiver's own link to it, which it makes if it has none:
// NodeOptions::automaticConnections). Nodes do not relay.
//
// Backpressure: at most `windowMessages` messages (and `windowBytes`) to
// one peer node are in flight, counted from the send until the receiving
// actor has handled the message (its mailbox element is gone). A sender
// past the window waits in its send: a thread, or an actor's scheduler
// thread (as with any bounded queue, two nodes flooding each other with
// every scheduler thread held back can stall: size windows and threads for
// it). Pipe callbacks never wait.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <actorpipe/actors/backends.h>
#include <actorpipe/runtime/error.h>

namespace caf {
class actor_system_config;
}

namespace actorpipe::remote {

namespace detail {
class NodeCore;
}

struct NodeOptions {
  // Where peers reach this node (tcp:// across hosts; shm:// for processes
  // on this host only). Port 0: the kernel picks one (see Node::url()).
  std::vector<std::string> listen{"tcp://127.0.0.1:0"};
  // Shared by every node of the job; peers without it are refused before
  // they can send anything. Empty: no authentication (loopback tests).
  std::string secret;
  std::chrono::milliseconds heartbeatInterval{500};
  std::chrono::milliseconds heartbeatTimeout{2500};
  // How long remoteActor() waits for the peer and its answer.
  std::chrono::milliseconds lookupTimeout{10000};
  // The CAF-encoded part of one message (its tensors are apart).
  size_t maxMessageBytes{64u << 20};
  // Tensors of one message, and their bytes together: a receiver holds
  // that much memory for a message before its bytes arrive (one message
  // larger than the window is let in alone), so a peer can ask for no more.
  size_t maxTensors{4096};
  size_t maxTensorBytes{size_t{16} << 30};
  // The window: messages (and their bytes, tensors included) sent to one
  // peer node and not yet done with there (its actor has handled them). A
  // sender past it is held back until the peer catches up; a message
  // larger than the whole window goes alone. A link's batches take at most
  // a sixteenth of the window's messages, so several are in flight while
  // the peer works (4096: one-way small messages 0.6 -> 1.3 M/s over shm,
  // docs/benchmarks.md).
  size_t windowMessages{4096};
  size_t windowBytes{size_t{256} << 20};
  // Frames the window does not count, queued for a peer and not yet
  // written: answers to its lookups and to its messages for actors that are
  // gone, DOWNs, CREDITs, BEATs. A peer that asks without reading makes
  // them pile up; past this its link is cut.
  size_t maxQueuedControlBytes{size_t{4} << 20};
  // Proxies a peer's messages may have this node hold at once: handles of
  // other nodes' actors that came inside them, each held until its actor's
  // DOWN or its link's end. Past this the peer's link is cut.
  size_t maxPeerHandles{size_t{1} << 16};
  // Requests to one peer node's actors whose answer has not come (each
  // failed at once if the link ends). Past this a request fails at once
  // with kTooManyRequests, as Ray's max_pending_calls: a node that answers
  // nothing (while it beats) would otherwise have them pile up for ever.
  // Those of requesters that have ended are forgotten first.
  size_t maxPendingRequests{size_t{1} << 16};
  // Requests of one peer node (counted per link, not by the node id it
  // states) waiting at each channel and workqueue this
  // node exports (a read of an empty channel, a write to a full one, a
  // worker's read while no job waits): each holds its answer's promise
  // here, a write its item, and a peer's message is done with once parked,
  // so the window does not bound them. Past this one fails at once with
  // kTooManyRequests (RemoteChannel, importChannel and RemoteWorker wait
  // and ask again); those of requesters that ended, or whose node left, are
  // let go first. An honest node reaches it only with that many readers,
  // writers or workers blocked on one channel or queue at once.
  size_t maxParkedPerPeer{1024};
  // And the bytes of the writes among them, as they came on the wire
  // (tensors included): past this a write that would wait is refused the
  // same way, unless the node has none parked (one larger than this waits
  // alone, as one message larger than the window goes alone).
  size_t maxParkedBytesPerPeer{size_t{256} << 20};
  // Links a peer's actors may hold to this node's actors at once (LINK:
  // each an attachable here and a proxy held). Past this its link is cut.
  size_t maxPeerLinks{size_t{1} << 16};
  // A message that brings a handle of a third node's actor, to which this
  // node has no link: ask its sender where that node listens, link there
  // (the secret applies; the node must be the one named), then deliver it,
  // holding the sender's later messages in order meanwhile (at most
  // lookupTimeout). Off: such a message is refused (kUnsendable). As CAF's
  // middleman.enable-automatic-connections; nodes never relay.
  bool automaticConnections{true};
  DefaultBackends backends;
};

// One link to a peer node, as seen from this one.
struct LinkStats {
  std::string peer;
  size_t inFlightMessages{0};
  size_t inFlightBytes{0};
  size_t maxInFlightMessages{0};  // the most ever, since the link began
  size_t maxInFlightBytes{0};
  size_t heldBack{0};  // sends that waited for the window
  size_t proxies{0};   // the peer's actors with a proxy here now
  size_t handles{0};   // of those, the ones held for handles inside messages
  size_t pendingRequests{0};  // requests to its actors awaiting answers
};

// Errors of this layer: caf::error in category "actorpipe" with these codes
// (code 1 is any other actorpipe Error, see toCafError).
enum class RemoteError : uint8_t {
  kNodeLeft = 2,     // the node said goodbye
  kNodeLost = 3,     // the node died, froze or became unreachable
  kNoSuchActor = 4,  // nothing is published under that name
  kUnsendable = 5,   // a type in the message cannot be encoded, or it is too big
  kBadInterface = 6, // the published actor's interface is not the handle's
  kWindowFull = 7,   // trySend: the window to the actor's node is full
  kClosed = 8,       // a client or server closed (client_server.h)
  kTooManyRequests = 9,  // maxPendingRequests to that node await answers, or
                         // maxParkedPerPeer wait at a channel's or a
                         // workqueue's owner
};
caf::error makeError(RemoteError code, std::string text);
// Whether `error` is this layer's `code`.
bool isError(const caf::error& error, RemoteError code);

namespace detail {
// While one lives on a thread, a send to a remote actor whose node's window
// is full is not made (and not waited for): refused() says so.
class TrySend {
 public:
  TrySend();
  ~TrySend();
  TrySend(const TrySend&) = delete;
  TrySend& operator=(const TrySend&) = delete;
  bool refused() const;
};
// For the link: whether a TrySend lives on this thread; noting a refusal.
bool trying();
void refuse();
} // namespace detail

// The non-blocking send: sends `xs...` from `self` (an actor pointer or a
// scoped_actor) to `dest` unless `dest` is an actor on another node whose
// window is full; then nothing is sent and the error is kWindowFull (drop,
// retry later, or send and wait). A local `dest` always takes the message.
template <class Self, class Dest, class... Ts>
caf::error trySend(Self&& self, const Dest& dest, Ts&&... xs) {
  detail::TrySend scope;
  self->send(dest, std::forward<Ts>(xs)...);
  if (!scope.refused()) return caf::error();
  return makeError(RemoteError::kWindowFull, "the window to the actor's node is full");
}

// Registers what remote messages of actorpipe carry (Tensor); call on the
// config before the actor system is made, on every node.
void addMessageTypes(caf::actor_system_config& config);
// addMessageTypes; CAF's work-sharing scheduler: its idle workers block
// until work comes, where work stealing's poll and then sleep in steps (a
// remote request/reply measured 35 us against 234 us on the same machine,
// docs/benchmarks.md, "Remote actors"); and CAF's io module, for the node
// id only (actor handles inside messages name their node). What a node's
// system must have: a Node refuses a system without a node id.
void configure(caf::actor_system_config& config);

class Node {
 public:
  // Listens at once; throws std::runtime_error if it cannot, and
  // std::invalid_argument for a system made without configure() (no node id).
  Node(caf::actor_system& system, NodeOptions options = NodeOptions());
  ~Node();  // leave()
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  caf::actor_system& system() const { return system_; }
  const NodeOptions& options() const;
  // This node's identity (boot id, network namespace, pid and a nonce): two
  // containers with the same host name are still two nodes.
  const std::string& id() const;
  // The URL peers use for `transport` ("tcp", "shm").
  std::string url(const std::string& transport = "tcp") const;

  // Publishes `handle` under `name` (printable, no spaces, <= 255 bytes);
  // a typed handle's interface is checked by typed remoteActor<Handle>.
  template <class Handle>
  Error publish(const Handle& handle, const std::string& name) {
    return publishActor(caf::actor_cast<caf::strong_actor_ptr>(handle),
                        system_.message_types(handle), name);
  }
  void unpublish(const std::string& name);
  // Unpublishes `name` only while it still names `handle` (an owner that
  // closes must not take down a name someone published since).
  template <class Handle>
  void unpublish(const std::string& name, const Handle& handle) {
    unpublishActor(name, caf::actor_cast<caf::strong_actor_ptr>(handle));
  }

  // Runs `handle` (an event-based actor of this node's system) on the
  // node's loop thread for the messages its peers send it, and for the
  // responses to its requests, whenever such a message finds it idle (a
  // message that comes while it starts or runs elsewhere is handled where
  // it runs): no hand-off to a scheduler thread on the way
  // in, which is most of a small remote round trip otherwise (30 -> 8 us
  // over shm, docs/benchmarks.md, "Remote actors"). Messages from local
  // actors still run it on CAF's scheduler; CAF's mailbox lets one thread
  // at a time run it. For actors whose handlers are short and never block:
  // while one runs, the loop reads, writes and beats for none of this
  // node's links. One resume longer than `budget` ends the arrangement
  // (warned). Does nothing under ThreadSanitizer (detail/loop_unit.h).
  template <class Handle>
  void runOnLoop(const Handle& handle,
                 std::chrono::microseconds budget = std::chrono::milliseconds(20)) {
    hostOnLoop(caf::actor_cast<caf::strong_actor_ptr>(handle), budget);
  }

  // The actor published as `name` on the node at `url`; blocks until it
  // answers (at most lookupTimeout). One pipe per peer node, reused.
  caf::expected<caf::actor> remoteActor(const std::string& url, const std::string& name);
  template <class Handle>
  caf::expected<Handle> remoteActor(const std::string& url, const std::string& name) {
    std::set<std::string> interface;
    auto found = lookupActor(url, name, interface);
    if (!found) return std::move(found.error());
    auto wanted = system_.message_types<Handle>();
    if (interface != wanted) {
      return makeError(RemoteError::kBadInterface,
                       "the actor published as '" + name + "' at " + url +
                           " does not have the interface of the handle asked for");
    }
    return caf::actor_cast<Handle>(std::move(*found));
  }

  // Ends `handle` (exit_reason::user_shutdown) when this node leaves: for
  // actors a node runs on its own behalf (the owners of exported channels
  // and workqueues), which a peer's request parked at them would otherwise
  // keep alive, and the actor system's end waiting for them.
  template <class Handle>
  void endOnLeave(const Handle& handle) {
    endActorOnLeave(caf::actor_cast<caf::strong_actor_ptr>(handle));
  }

  // Says BYE to every peer and closes; idempotent. Peers' monitors see
  // kNodeLeft; requests pending here fail with kNodeLeft.
  void leave();

  // Peers linked now (their ids), for tools and tests.
  std::vector<std::string> peers() const;
  std::vector<LinkStats> stats() const;

 private:
  void hostOnLoop(caf::strong_actor_ptr actor, std::chrono::microseconds budget);
  void endActorOnLeave(caf::strong_actor_ptr actor);
  void unpublishActor(const std::string& name, const caf::strong_actor_ptr& actor);
  Error publishActor(caf::strong_actor_ptr actor, std::set<std::string> interface,
                     const std::string& name);
  caf::expected<caf::strong_actor_ptr> lookupActor(const std::string& url,
                                                   const std::string& name,
                                                   std::set<std::string>& interface);

  caf::actor_system& system_;
  std::shared_ptr<detail::NodeCore> core_;
};

} // namespace actorpipe::remote
