// Authentication by shared secret, handshake and operation timeouts, and
// bounded pending operations.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <actorpipe/runtime/detail/wire.h>

#include "../support/harness.h"
#include "../support/raw_peer.h"

using namespace actorpipe;
using namespace testing;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<Context> withSecret(const std::string& name, const std::string& secret, ContextOptions o = {}) {
  return makeContext(name, o.secret(secret));
}

void roundTrip(Pipe& a, Pipe& b) {
  Storage s;
  s.tensors.push_back(pattern(200000, 5));
  REQUIRE(!writeSync(a, messageOver(s, "secret handshake")));
  Received r = readSync(b);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.storage.tensors[0] == s.tensors[0]);
}

}  // namespace

TEST_CASE("peers with the same secret talk, and move to shm authenticated") {
  auto server = withSecret("server", "open sesame");
  auto client = withSecret("client", "open sesame");
  auto listener = server->listen({"shm://", "tcp://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  roundTrip(*pipe, *accepted);
  roundTrip(*accepted, *pipe);
  CHECK(pipe->info().transport == "shm");
}

TEST_CASE("a peer without the secret is refused, with a clear error, and costs the listener nothing") {
  auto server = withSecret("server", "open sesame");
  auto listener = server->listen({"tcp://127.0.0.1:0"});

  auto stranger = makeContext("stranger");
  auto refused = stranger->connect(listener->url("tcp"));
  Error e = writeSync(*refused, Message());
  CHECK(e.isOfType<AuthenticationError>());
  CHECK(e.what().find("authentication required") != std::string::npos);

  auto impostor = withSecret("impostor", "open barley");
  auto wrong = impostor->connect(listener->url("tcp"));
  e = writeSync(*wrong, Message());
  CHECK(e.isOfType<AuthenticationError>());
  CHECK(e.what().find("does not know our secret") != std::string::npos);

  // Raw garbage in place of a challenge.
  int fd = rawConnect(listener->url("tcp"));
  std::string bogus = wire::encodeHeader(wire::FrameType::kChallenge, 8) + std::string("\x04\0\0\0abcd", 8);
  (void)!::send(fd, bogus.data(), bogus.size(), MSG_NOSIGNAL);
  char c;
  while (::recv(fd, &c, 1, 0) > 0) {}  // the reject, then the close
  ::close(fd);

  // The listener carries on for peers that know the secret.
  auto friendly = withSecret("friend", "open sesame");
  auto pipe = friendly->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  roundTrip(*pipe, *accepted);
}

TEST_CASE("a peer with a secret refuses one without") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = withSecret("client", "open sesame");
  auto pipe = client->connect(listener->url("tcp"));
  Error e = writeSync(*pipe, Message());
  CHECK(e.isOfType<AuthenticationError>());
  CHECK(e.what().find("does not use authentication") != std::string::npos);
}

TEST_CASE("a listener that accepts and never answers: the handshake times out") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(fd, 4);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  auto client = makeContext("client");
  auto start = std::chrono::steady_clock::now();
  auto pipe = client->connect("tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port)),
                              PipeOptions().handshakeTimeout(300ms));
  Error e = writeSync(*pipe, Message(), 10s);
  CHECK(e.isOfType<TimeoutError>());
  CHECK(e.what().find("handshake") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  ::close(fd);
}

TEST_CASE("a client that connects and never speaks is hung up on") {
  auto server = makeContext("server", ContextOptions().handshakeTimeout(300ms));
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  int fd = rawConnect(listener->url("tcp"));
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  auto start = std::chrono::steady_clock::now();
  CHECK(::recv(fd, &c, 1, 0) == 0);  // closed by the listener, not by our timeout
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  ::close(fd);
}

TEST_CASE("an operation past its deadline fails the pipe with a timeout") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client", ContextOptions().operationTimeout(3s));
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  roundTrip(*accepted, *pipe);  // operations that finish in time are untouched
  Received r = readSync(*pipe, 10s);  // nothing ever comes
  CHECK(r.error.isOfType<TimeoutError>());
  CHECK(r.error.what().find("readDescriptor") != std::string::npos);
  CHECK(writeSync(*pipe, Message()).isOfType<TimeoutError>());  // the pipe is done
}

TEST_CASE("pending operations per pipe are bounded") {
  Limits limits;
  limits.maxPendingOperations = 4;
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client", ContextOptions().limits(limits));
  auto pipe = client->connect(listener->url("tcp"));
  std::promise<Error> fifth;
  for (int i = 0; i < 4; ++i) pipe->readDescriptor([](const Error&, Descriptor) {});
  pipe->readDescriptor([&](const Error& e, Descriptor) { fifth.set_value(e); });
  auto f = fifth.get_future();
  REQUIRE(ready(f, 5s));
  Error e = f.get();
  CHECK(e.isOfType<LimitExceededError>());
}

TEST_CASE("pipes waiting for accept() per listener are bounded") {
  Limits limits;
  limits.maxPendingPipes = 3;
  auto server = makeContext("server", ContextOptions().limits(limits));
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client");
  std::vector<std::shared_ptr<Pipe>> pipes;
  for (int i = 0; i < 3; ++i) {
    pipes.push_back(client->connect(listener->url("tcp")));
    REQUIRE(!writeSync(*pipes.back(), Message()));  // handshaken, waiting for accept()
  }
  auto extra = client->connect(listener->url("tcp"));
  Error e = writeSync(*extra, Message());
  CHECK(e);  // refused at once: the listener closed it
  for (int i = 0; i < 3; ++i) REQUIRE(acceptSync(*listener) != nullptr);
  auto later = client->connect(listener->url("tcp"));
  CHECK(!writeSync(*later, Message()));
  CHECK(acceptSync(*listener) != nullptr);
}
