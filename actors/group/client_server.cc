#include <actorpipe/actors/group/client_server.h>

#include <actorpipe/actors/group/frames.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <actorpipe/actors/group/environment.h>
#include <actorpipe/actors/group/mailbox.h>
#include <actorpipe/runtime/listener.h>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;

std::string tcpUrl(const std::string& host, int port) {
  const std::string ip = resolveIPv4(host);
  return "tcp://" + (ip.empty() ? host : ip) + ":" + std::to_string(port);
}

Message clientIntroduction(int id) {
  Message message;
  message.metadata = encode(LinkFrame::introduce(LinkFrame::Role::kClient, id));
  return message;
}

// The client's introduction (id 0) or the server's answer to it.
bool isClientIntroduction(const std::string& bytes, int& id) {
  LinkFrame frame;
  if (decode(bytes, frame) || frame.kind != LinkFrame::Kind::kIntroduce || frame.role != LinkFrame::Role::kClient) {
    return false;
  }
  id = frame.rank;
  return true;
}

} // namespace

// Pipes are handed to the server's mailbox once their client said hello.
struct ServerAcceptor : std::enable_shared_from_this<ServerAcceptor> {
  std::shared_ptr<Listener> listener;
  std::weak_ptr<Mailbox> mailbox;
  std::atomic<int> nextClient{0};
  std::mutex mutex;
  std::condition_variable changed;
  Error error;
  bool failed{false};

  void acceptNext() {
    std::weak_ptr<ServerAcceptor> weak = shared_from_this();
    listener->accept([weak](const Error& error, std::shared_ptr<Pipe> pipe) {
      auto self = weak.lock();
      if (!self) return;
      if (error) {
        std::lock_guard<std::mutex> lock(self->mutex);
        self->error = error;
        self->failed = true;
        self->changed.notify_all();
        return;
      }
      pipe->readDescriptor([weak, pipe](const Error& error, Descriptor descriptor) {
        auto self = weak.lock();
        int ignored = 0;
        if (!self || error || !isClientIntroduction(descriptor.metadata, ignored)) return;
        pipe->read(Allocation{}, [weak, pipe](const Error& error) {
          auto self = weak.lock();
          if (!self || error) return;
          const int id = self->nextClient++;
          pipe->write(clientIntroduction(id), [](const Error&) {});
          if (auto mailbox = self->mailbox.lock()) mailbox->add(id, pipe);
        });
      });
      self->acceptNext();
    });
  }
};

// --- Server -----------------------------------------------------------------

Error Server::create(const std::string& host, int port, std::unique_ptr<Server>& server) {
  return create(host, port, ClientServerOptions{}, server);
}

Error Server::create(const std::string& host, int port, const ClientServerOptions& options,
                     std::unique_ptr<Server>& server) {
  std::unique_ptr<Server> created(new Server());
  created->mailbox_ = std::make_shared<Mailbox>(makeMessagingContext("server", options.secret));
  auto listener = created->mailbox_->context().listen({"shm://", tcpUrl(host, port)});
  auto acceptor = std::make_shared<ServerAcceptor>();
  acceptor->listener = listener;
  acceptor->mailbox = created->mailbox_;
  std::string address;
  try {
    address = listener->address("tcp");
  } catch (const std::exception&) {
  }
  acceptor->acceptNext();
  if (address.empty()) {
    // The listener could not bind: its accept fails with the reason.
    std::unique_lock<std::mutex> lock(acceptor->mutex);
    acceptor->changed.wait_for(lock, std::chrono::seconds(5), [&] { return acceptor->failed; });
    return acceptor->failed ? acceptor->error
                            : ACTORPIPE_ERROR(SystemError, "listen on " + tcpUrl(host, port), 0);
  }
  created->port_ = std::atoi(address.substr(address.rfind(':') + 1).c_str());
  created->acceptor_ = acceptor;
  server = std::move(created);
  return Error::kSuccess;
}

Server::~Server() {
  close();
  mailbox_->shutdown();
}

int Server::port() const { return port_; }

Error Server::waitForClients(size_t count, Timeout timeout) {
  return mailbox_->waitForPeers(count, timeout);
}

std::vector<int> Server::clients() const { return mailbox_->peers(); }

Error Server::send(int client, const Outgoing& message) { return mailbox_->send({client}, message); }

Error Server::broadcast(const Outgoing& message) { return mailbox_->send(mailbox_->peers(), message); }

Error Server::receive(int client, Received& message, const std::string& tag,
                      const std::vector<TensorView>& into, Timeout timeout) {
  return mailbox_->receive(client, false, tag, into, message, timeout);
}

Error Server::receiveAny(Received& message, const std::string& tag, const std::vector<TensorView>& into,
                         Timeout timeout) {
  return mailbox_->receive(-1, true, tag, into, message, timeout);
}

bool Server::hasMessage(int client) const { return mailbox_->ready(client) > 0; }

TrafficStats Server::stats() const { return mailbox_->stats(0, true); }
TrafficStats Server::stats(int client) const { return mailbox_->stats(client, false); }

void Server::close() {
  if (acceptor_) acceptor_->listener->close();
  mailbox_->close();
}

// --- Client -----------------------------------------------------------------

Error Client::connect(const std::string& host, int port, Timeout retryFor,
                      std::unique_ptr<Client>& client) {
  return connect(host, port, retryFor, ClientServerOptions{}, client);
}

Error Client::connect(const std::string& host, int port, Timeout retryFor,
                      const ClientServerOptions& options, std::unique_ptr<Client>& client) {
  std::unique_ptr<Client> created(new Client());
  created->mailbox_ = std::make_shared<Mailbox>(makeMessagingContext("client", options.secret));
  const std::string url = tcpUrl(host, port);
  const auto deadline = Clock::now() + retryFor;
  Error last;
  for (;;) {
    auto pipe = created->mailbox_->context().connect(url);
    pipe->write(clientIntroduction(0), [](const Error&) {});
    struct Answer {
      std::mutex mutex;
      std::condition_variable cv;
      bool done{false};
      Error error;
      std::string text;
    };
    auto answer = std::make_shared<Answer>();
    pipe->readDescriptor([answer](const Error& error, Descriptor descriptor) {
      std::lock_guard<std::mutex> lock(answer->mutex);
      answer->error = error;
      answer->text = descriptor.metadata;
      answer->done = true;
      answer->cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(answer->mutex);
      answer->cv.wait_until(lock, std::max(deadline, Clock::now() + std::chrono::seconds(5)),
                            [&] { return answer->done; });
    }
    std::lock_guard<std::mutex> lock(answer->mutex);
    int id = -1;
    if (answer->done && !answer->error && isClientIntroduction(answer->text, id)) {
      pipe->read(Allocation{}, [](const Error&) {});
      created->id_ = id;
      created->mailbox_->add(-1, pipe);
      client = std::move(created);
      return Error::kSuccess;
    }
    pipe->close();
    last = !answer->done ? ACTORPIPE_ERROR(TimeoutError, "the server at " + url + " did not answer")
           : answer->error ? answer->error
                           : ACTORPIPE_ERROR(ProtocolError, "the server at " + url +
                                                                " answered with something other than a client id");
    // Refused for the secret: trying again would only be refused again.
    if (last.isOfType<AuthenticationError>()) return last;
    if (Clock::now() + std::chrono::milliseconds(50) >= deadline) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Client::~Client() { mailbox_->shutdown(); }

Error Client::send(const Outgoing& message) { return mailbox_->send({-1}, message); }

Error Client::receive(Received& message, const std::string& tag, const std::vector<TensorView>& into,
                      Timeout timeout) {
  return mailbox_->receive(-1, false, tag, into, message, timeout);
}

TrafficStats Client::stats() const { return mailbox_->stats(-1, false); }

void Client::close() { mailbox_->close(); }

} // namespace actorpipe::group
