#pragma once
// torch-ipc's client and server (ipc.server / ipc.client) on nodes:
// messages of any values CAF can inspect (Tensors, numbers, strings,
// vectors, your registered types) between a server and its clients in other
// processes and on other hosts, riding the nodes' links: their secret,
// heartbeats, windows, and channels negotiated for the Tensors inside.
//
//   // the server's process
//   auto server = remote::Server::create(node, "params");       // expected<unique_ptr<Server>>
//   (*server)->waitForClients(2);
//   int from;
//   caf::message m;
//   (*server)->receiveAny(from, m);                              // fair across clients
//   (*server)->send(from, caf::make_message(weights, std::string("weights")));
//   // a client's process
//   auto client = remote::Client::connect(node, url, "params");  // retries while the server starts
//   (*client)->send(caf::make_message(grads, int32_t(step)));
//   (*client)->receive(m);                                       // m.get_as<Tensor>(0) ...
//
// Order: one client's messages to the server, and the server's to one
// client, arrive in the order sent. A received Tensor is the one that
// travelled (no copy on this side).
//
// Backpressure: each side queues at most ClientServerOptions::queueMessages
// messages from each peer that nobody has received yet; a send past that
// waits until the receiver takes one (send returns once the message is
// queued at the other side).
//
// Failures are errors, never hangs: a client whose node is lost, leaves, or
// which closes fails receives from it once its queued messages are taken
// (receiveAny reports each such client once, then goes on with the others;
// past 1,024 gone clients not yet told, the oldest is forgotten with what
// it had queued);
// a client whose server is gone fails its sends and, once drained, its
// receives. Each error names the client or server and the cause (the node
// layer's kNodeLost / kNodeLeft, or kClosed for a close).
//
// Hostile peers: only a client that said hello is heard, only from the
// sender it said hello with or its agent (their handles, not addresses),
// which must be of that sender's node and no other client's;
// one node (link) has at most maxClientsPerNode clients at a server, gone ones
// included until the server has received their loss; a peer's sends
// waiting for room are bounded per client; a client hears only actors of
// its server's node. Queues are bounded in messages; each message is bounded by
// the node's limits (NodeOptions::maxMessageBytes, maxTensorBytes). The
// node's secret (NodeOptions::secret) keeps strangers out altogether.
//
// Every call is thread-safe; a Client sends one message at a time. The Node
// must outlive its Servers and Clients.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/message.hpp>

namespace actorpipe::remote {

class Node;

using Timeout = std::chrono::milliseconds;
constexpr Timeout kForever = Timeout::max();

struct ClientServerOptions {
  // Messages from one peer queued here and not yet received.
  size_t queueMessages{256};
  // Clients one node (one link) may have at a server (a peer makes
  // senders at will).
  size_t maxClientsPerNode{64};
};

namespace detail {
struct ServerShared;
struct ClientShared;
} // namespace detail

class Server {
 public:
  // Serves as `name` on `node`: clients connect to node.url(...) and name.
  static caf::expected<std::unique_ptr<Server>> create(Node& node, const std::string& name,
                                                       ClientServerOptions options = {});
  ~Server();  // close()

  // Waits until at least `count` clients are connected.
  caf::error waitForClients(size_t count, Timeout timeout = kForever);
  // The clients connected now (ids in connection order, from 0).
  std::vector<int> clients() const;

  // Waits until the client has queued it (or `timeout`: request_timeout,
  // the message may still arrive). A client slow to take it holds up only
  // the sends to it.
  caf::error send(int client, caf::message message, Timeout timeout = kForever);
  // To every connected client in turn; the first error, after trying all.
  caf::error broadcast(const caf::message& message, Timeout timeout = kForever);
  caf::error receive(int client, caf::message& message, Timeout timeout = kForever);
  // From whichever client has a message, taking clients in turn.
  caf::error receiveAny(int& client, caf::message& message, Timeout timeout = kForever);

  // Unpublishes and ends the server: clients see kClosed.
  void close();

 private:
  Server() = default;
  std::shared_ptr<detail::ServerShared> shared_;
};

class Client {
 public:
  // Looks `name` up at `url` until it is there (the server may start
  // later) for at most `retryFor`, then says hello.
  static caf::expected<std::unique_ptr<Client>> connect(Node& node, const std::string& url,
                                                        const std::string& name,
                                                        Timeout retryFor = std::chrono::seconds(10),
                                                        ClientServerOptions options = {});
  ~Client();  // close()

  int id() const;  // given by the server, in connection order
  // Waits until the server has queued it (or `timeout`).
  caf::error send(caf::message message, Timeout timeout = kForever);
  caf::error receive(caf::message& message, Timeout timeout = kForever);
  // Ends this client: the server sees kClosed for it.
  void close();

 private:
  Client() = default;
  std::shared_ptr<detail::ClientShared> shared_;
};

} // namespace actorpipe::remote
