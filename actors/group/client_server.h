#pragma once
// Client and Server on pipes (torch-ipc's ipc.client / ipc.server):
//
//   std::unique_ptr<Server> server;
//   Server::create("127.0.0.1", 8080, server);
//   std::unique_ptr<Client> client;
//   Client::connect("127.0.0.1", 8080, std::chrono::seconds(10), client);
//   client->send(Outgoing().withTag("hi"));
//   Received message;
//   server->receiveAny(message);            // fair across clients
//
// Messages carry a tag, an id (the sender numbers them unless told), a
// small byte string and tensors. A receiver either lets the message
// allocate its tensors (Received::tensors point into Received's storage) or
// passes its own tensors to receive into, in place (no copy when the
// message is still on the wire). Receives may ask for one tag: messages with
// other tags wait, in order, for a receive that wants them.
//
// Failures are errors, never spins: a peer that dies or closes fails
// receives from it (RankFailedError naming the client id; the server is
// id -1), and a client that cannot connect within its retry time gets the
// last ConnectError, with the system's errno.
//
// With ClientServerOptions::secret, the server and its clients prove to each
// other that they know it before any message (ContextOptions::secret): a
// process without it cannot connect, and a client cannot be fooled by a
// stranger listening on the server's port. A client the server refuses
// fails at once with an AuthenticationError.
//
// send() returns once the message has left this process's hands: the
// caller's tensors may be reused (on same-host links the receiver pulls
// them, so send waits for the receiver to receive). Every call is
// thread-safe; callbacks never reach the caller.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/actors/group/errors.h>
#include <actorpipe/actors/group/tensor.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

class Mailbox;
struct ServerAcceptor;

struct Outgoing {
  std::string tag;
  uint64_t id{0};  // 0: the next number of this sender
  std::string data;
  std::vector<TensorView> tensors;  // must stay valid until send() returns

  Outgoing& withTag(std::string t) {
    tag = std::move(t);
    return *this;
  }
  Outgoing& withData(std::string d) {
    data = std::move(d);
    return *this;
  }
  Outgoing& withTensor(const TensorView& t) {
    tensors.push_back(t);
    return *this;
  }
};

struct Received {
  int from{-1};  // the client id at the server; -1 (the server) at a client
  std::string tag;
  uint64_t id{0};
  std::string data;
  std::vector<TensorView> tensors;  // the caller's (received in place) or in `storage`
  std::vector<std::vector<uint8_t>> storage;
};

struct TrafficStats {
  uint64_t messagesSent{0};
  uint64_t messagesReceived{0};
  uint64_t bytesSent{0};  // data and tensors, not headers
  uint64_t bytesReceived{0};
};

using Timeout = std::chrono::milliseconds;
constexpr Timeout kForever = Timeout::max();

struct ClientServerOptions {
  std::string secret;  // empty: none; both sides need the same one
};

class Server {
 public:
  // Port 0 picks a free port (see port()).
  static Error create(const std::string& host, int port, std::unique_ptr<Server>& server);
  static Error create(const std::string& host, int port, const ClientServerOptions& options,
                      std::unique_ptr<Server>& server);
  ~Server();

  int port() const;
  // Blocks until at least `count` clients are connected.
  Error waitForClients(size_t count, Timeout timeout = kForever);
  std::vector<int> clients() const;

  Error send(int client, const Outgoing& message);
  // The same message to every connected client.
  Error broadcast(const Outgoing& message);
  // From one client; `tag` empty takes any tag; `into` (if not empty)
  // receives the tensors in place and must match their sizes.
  Error receive(int client, Received& message, const std::string& tag = "",
                const std::vector<TensorView>& into = {}, Timeout timeout = kForever);
  // From whichever client has a message, taking clients in turn so that a
  // busy one cannot starve the others. A client that died is reported once
  // (as the error) and then left out.
  Error receiveAny(Received& message, const std::string& tag = "",
                   const std::vector<TensorView>& into = {}, Timeout timeout = kForever);

  // Whether a message from `client` is here already (a receive would not wait).
  bool hasMessage(int client) const;

  TrafficStats stats() const;
  TrafficStats stats(int client) const;
  void close();

 private:
  Server() = default;
  std::shared_ptr<Mailbox> mailbox_;
  std::shared_ptr<ServerAcceptor> acceptor_;
  int port_{0};
};

class Client {
 public:
  // Retries refused connections for `retryFor` (the server may start later).
  static Error connect(const std::string& host, int port, Timeout retryFor,
                       std::unique_ptr<Client>& client);
  static Error connect(const std::string& host, int port, Timeout retryFor,
                       const ClientServerOptions& options, std::unique_ptr<Client>& client);
  ~Client();

  int id() const { return id_; }  // assigned by the server, in connection order
  Error send(const Outgoing& message);
  Error receive(Received& message, const std::string& tag = "",
                const std::vector<TensorView>& into = {}, Timeout timeout = kForever);
  TrafficStats stats() const;
  void close();

 private:
  Client() = default;
  std::shared_ptr<Mailbox> mailbox_;
  int id_{-1};
};

} // namespace actorpipe::group
