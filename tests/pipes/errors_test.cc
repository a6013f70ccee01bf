// Bad input and failures: every case ends in a clear Error through the API,
// promptly, and never in a crash or a hang.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include <actorpipe/runtime/detail/log.h>
#include <actorpipe/runtime/detail/wire.h>

#include "../support/raw_peer.h"
#include "../support/scenarios.h"

using namespace actorpipe;
using namespace testing;

namespace {

// A port nothing listens on: bound (so no other test can take it) but not
// listening, so connecting is refused.
struct RefusingPort {
  int fd{-1};
  int port{0};
  RefusingPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~RefusingPort() { ::close(fd); }
};

Error readDescriptorError(Pipe& pipe) {
  Received r = readSync(pipe, std::chrono::seconds(10));
  return r.error;
}

}  // namespace

TEST_CASE("connect to nowhere fails promptly, naming the address and the cause") {
  auto context = makeContext();
  RefusingPort nowhere;
  std::string url = "tcp://127.0.0.1:" + std::to_string(nowhere.port);
  auto pipe = context->connect(url);
  auto start = std::chrono::steady_clock::now();
  Storage s;
  s.payloads.push_back(pattern(10, 1));
  Error w = writeSync(*pipe, messageOver(s, "x"), std::chrono::seconds(10));
  Error r = readDescriptorError(*pipe);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE(w);
  CHECK(w.isOfType<ConnectError>());
  CHECK(w.what().find(url.substr(6)) != std::string::npos);
  CHECK(w.what().find("refused") != std::string::npos);
  CHECK(r.isOfType<ConnectError>());
}

TEST_CASE("an unknown URL scheme is an error on the pipe and on the listener") {
  auto context = makeContext();
  auto pipe = context->connect("carrier-pigeon://127.0.0.1:1");
  Error w = writeSync(*pipe, Message());
  CHECK(w.isOfType<UnknownTransportError>());
  CHECK(w.what().find("carrier-pigeon") != std::string::npos);
  auto bad = context->connect("no-scheme-here");
  CHECK(writeSync(*bad, Message()).isOfType<LogicError>());

  auto listener = context->listen({"carrier-pigeon://127.0.0.1:0"});
  Error a;
  CHECK(acceptSync(*listener, &a) == nullptr);
  CHECK(a.isOfType<UnknownTransportError>());
}

TEST_CASE("a bad address or a port in use is an error through accept") {
  auto context = makeContext();
  auto first = context->listen({"tcp://127.0.0.1:0"});
  auto second = context->listen({first->url("tcp")});
  Error e;
  CHECK(acceptSync(*second, &e) == nullptr);
  CHECK(e.isOfType<SystemError>());
  CHECK(e.castToType<SystemError>()->errorCode() == EADDRINUSE);
  auto third = context->listen({"tcp://not an address:99999"});
  CHECK(acceptSync(*third, &e) == nullptr);
  CHECK(e);
}

TEST_CASE("closing a listener aborts a pending accept") {
  auto context = makeContext();
  auto listener = context->listen({"tcp://127.0.0.1:0"});
  std::promise<Error> promise;
  listener->accept([&](const Error& e, std::shared_ptr<Pipe> p) {
    CHECK(p == nullptr);
    promise.set_value(e);
  });
  listener->close();
  auto f = promise.get_future();
  REQUIRE(ready(f, std::chrono::seconds(10)));
  CHECK(f.get().isOfType<ListenerClosedError>());
  Error again;
  CHECK(acceptSync(*listener, &again) == nullptr);
  CHECK(again.isOfType<ListenerClosedError>());
}

TEST_CASE("a peer killed mid-transfer fails the pending operations") {
  killedMidTransfer([](const std::string& name) { return makeContext(name); }, "tcp://127.0.0.1:0", 64u << 20);
}

TEST_CASE("closing a pipe during its handshake fails its operations") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client");
  auto pipe = client->connect(listener->url("tcp"));
  std::promise<Error> written;
  std::promise<Error> described;
  pipe->write(Message(), [&](const Error& e) { written.set_value(e); });
  pipe->readDescriptor([&](const Error& e, Descriptor) { described.set_value(e); });
  pipe->close();
  auto w = written.get_future();
  auto d = described.get_future();
  REQUIRE(ready(w, std::chrono::seconds(10)));
  REQUIRE(ready(d, std::chrono::seconds(10)));
  CHECK(w.get().isOfType<PipeClosedError>());
  CHECK(d.get().isOfType<PipeClosedError>());
  // Later operations fail the same way.
  CHECK(writeSync(*pipe, Message()).isOfType<PipeClosedError>());
}

TEST_CASE("a client that hangs up mid-hello does not disturb the listener") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  int fd = rawConnect(listener->url("tcp"));
  std::string hello = frame(wire::FrameType::kHello, wire::encode(wire::Hello{"raw", {}, {}}));
  sendAll(fd, hello.substr(0, hello.size() / 2));
  ::close(fd);
  auto client = makeContext("client");
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  REQUIRE(!writeSync(*pipe, Message()));
  CHECK(!readSync(*accepted).error);
}

TEST_CASE("malformed frames from a server are protocol errors") {
  auto context = makeContext();
  SUBCASE("not an actorpipe peer") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    sendAll(fd, "HTTP/1.1 200 OK\r\n\r\n");
    Error e = readDescriptorError(*pipe);
    CHECK(e.isOfType<ProtocolError>());
    CHECK(e.what().find("magic") != std::string::npos);
    ::close(fd);
  }
  SUBCASE("wrong version") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    std::string w = welcomeFrame();
    w[2] = 99;
    sendAll(fd, w);
    Error e = readDescriptorError(*pipe);
    CHECK(e.isOfType<ProtocolError>());
    CHECK(e.what().find("version") != std::string::npos);
    ::close(fd);
  }
  SUBCASE("an oversized handshake frame is refused before allocation") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    sendAll(fd, wire::encodeHeader(wire::FrameType::kWelcome, 0xFFFFFFF0u));
    Error e = readDescriptorError(*pipe);
    CHECK(e.isOfType<LimitExceededError>());
    ::close(fd);
  }
  SUBCASE("a truncated welcome body") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    sendAll(fd, frame(wire::FrameType::kWelcome, std::string("\x05\x00\x00\x00" "ab", 6)));
    Error e = readDescriptorError(*pipe);
    CHECK(e.isOfType<ProtocolError>());
    CHECK(e.what().find("truncated") != std::string::npos);
    ::close(fd);
  }
  SUBCASE("a message frame announcing a tensor above the limit") {
    Limits limits;
    limits.maxTensorSize = 1 << 20;
    auto small = makeContext("small", ContextOptions().limits(limits));
    RawServer raw;
    auto pipe = small->connect(raw.url());
    int fd = raw.accept();
    CHECK(!recvFrame(fd).empty());  // the hello
    sendAll(fd, welcomeFrame());
    wire::MessageFrame m;
    m.descriptor.tensors.push_back({size_t(1) << 40, Device{kCpuDeviceType, 0}, nullopt, ""});
    m.routes.push_back({"basic", true, ""});
    sendAll(fd, frame(wire::FrameType::kMessage, wire::encode(m)));
    Error e = readDescriptorError(*pipe);
    CHECK(e.isOfType<LimitExceededError>());
    CHECK(e.what().find("tensor") != std::string::npos);
    ::close(fd);
  }
  SUBCASE("a message on a channel that was not negotiated") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    CHECK(!recvFrame(fd).empty());
    sendAll(fd, welcomeFrame());
    wire::MessageFrame m;
    m.descriptor.tensors.push_back({4, Device{kCpuDeviceType, 0}, nullopt, ""});
    m.routes.push_back({"smoke-signals", true, ""});
    sendAll(fd, frame(wire::FrameType::kMessage, wire::encode(m)));
    Error e = readDescriptorError(*pipe);
    CHECK(e.isOfType<ProtocolError>());
    ::close(fd);
  }
  SUBCASE("the peer hangs up in the middle of a message's data") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    CHECK(!recvFrame(fd).empty());
    sendAll(fd, welcomeFrame());
    wire::MessageFrame m;
    m.descriptor.payloads.push_back({1000, ""});
    sendAll(fd, frame(wire::FrameType::kMessage, wire::encode(m)) + std::string(10, 'x'));
    std::promise<Error> done;
    std::vector<uint8_t> buffer(1000);
    pipe->readDescriptor([&](const Error& e, Descriptor d) {
      REQUIRE(!e);
      Allocation a;
      a.payloads.push_back({buffer.data()});
      pipe->read(a, [&](const Error& e) { done.set_value(e); });
    });
    // Time for the read to be pending. A slower machine cannot fail this:
    // the 10 bytes sent come before the hang-up whenever the read starts.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::close(fd);
    auto f = done.get_future();
    REQUIRE(ready(f, std::chrono::seconds(10)));
    CHECK(f.get().isOfType<EOFError>());
  }
}

TEST_CASE("garbage from a client does not disturb the listener") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  for (std::string garbage : {std::string("GET / HTTP/1.0\r\n\r\n"),
                              wire::encodeHeader(wire::FrameType::kHello, 0xFFFFFFFFu),
                              frame(wire::FrameType::kMessage, "xx"),
                              frame(wire::FrameType::kHello, std::string(40, '\xff'))}) {
    int fd = rawConnect(listener->url("tcp"));
    sendAll(fd, garbage);
    char c;
    // The listener hangs up on it.
    CHECK(::recv(fd, &c, 1, 0) <= 0);
    ::close(fd);
  }
  auto client = makeContext("client");
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  CHECK(accepted->getRemoteName() == "client");
}

TEST_CASE("read() without a descriptor, and allocations that do not match") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client");
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);

  std::promise<Error> early;
  accepted->read(Allocation(), [&](const Error& e) { early.set_value(e); });
  auto f = early.get_future();
  REQUIRE(ready(f, std::chrono::seconds(10)));
  CHECK(f.get().isOfType<LogicError>());

  Storage s;
  s.payloads.push_back(pattern(100, 1));
  s.tensors.push_back(pattern(200, 2));
  REQUIRE(!writeSync(*pipe, messageOver(s, "m")));
  std::promise<Descriptor> described;
  accepted->readDescriptor([&](const Error& e, Descriptor d) {
    REQUIRE(!e);
    described.set_value(d);
  });
  Descriptor d = described.get_future().get();
  auto readWith = [&](Allocation a) {
    std::promise<Error> p;
    accepted->read(std::move(a), [&](const Error& e) { p.set_value(e); });
    auto fut = p.get_future();
    REQUIRE(ready(fut, std::chrono::seconds(10)));
    return fut.get();
  };
  CHECK(readWith(Allocation()).isOfType<LogicError>());  // counts differ
  Storage got;
  Allocation noMemory = allocate(d, got);
  noMemory.tensors[0].buffer = CpuBuffer{nullptr};
  CHECK(readWith(noMemory).isOfType<LogicError>());
  Allocation onGpu = allocate(d, got);
  onGpu.tensors[0].buffer = CudaBuffer{got.tensors[0].data(), nullptr};
  Error gpu = readWith(onGpu);
  CHECK(gpu.isOfType<LogicError>());
  CHECK(gpu.what().find("cuda") != std::string::npos);
  // The descriptor waited: a correct allocation still gets the data.
  CHECK(!readWith(allocate(d, got)));
  CHECK(got.payloads[0] == s.payloads[0]);
  CHECK(got.tensors[0] == s.tensors[0]);
}

TEST_CASE("a write that cannot be sent fails alone; the pipe carries on") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client");
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  std::vector<uint8_t> memory(64);
  Message gpu;
  gpu.tensors.push_back({CudaBuffer{memory.data(), nullptr}, memory.size(), nullopt, ""});
  Error e = writeSync(*pipe, gpu);
  // No CUDA channel (no GPU here): none negotiated for it. A CUDA channel
  // (a GPU here): the memory is not on a device. Either way, this write alone.
  CHECK((e.isOfType<NegotiationError>() || e.isOfType<CudaError>()));
  CHECK(e.what().find("cuda") != std::string::npos);
  Message noData;
  noData.payloads.push_back({nullptr, 10, ""});
  CHECK(writeSync(*pipe, noData).isOfType<LogicError>());
  Storage s;
  s.payloads.push_back(pattern(10, 3));
  REQUIRE(!writeSync(*pipe, messageOver(s, "fine")));
  Received r = readSync(*accepted);
  REQUIRE(!r.error);
  CHECK(r.descriptor.metadata == "fine");
}

TEST_CASE("Context::close and join: every pending callback fires once, none after join") {
  auto server = makeContext("server");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto client = makeContext("client");
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  std::atomic<int> fired{0};
  std::atomic<int> errors{0};
  std::mutex othersMutex;
  std::string others;  // what the callbacks got instead, if anything
  for (int i = 0; i < 5; ++i) {
    pipe->readDescriptor([&](const Error& e, Descriptor) {
      fired++;
      if (e.isOfType<ContextClosedError>()) {
        errors++;
      } else {
        std::lock_guard<std::mutex> guard(othersMutex);
        others += (e ? e.what() : std::string("no error")) + "; ";
      }
    });
  }
  std::atomic<int> acceptFired{0};
  listener->accept([&](const Error& e, std::shared_ptr<Pipe>) {
    CHECK(e);
    acceptFired++;
  });
  client->join();
  CHECK(fired == 5);
  {
    std::lock_guard<std::mutex> guard(othersMutex);
    INFO("other errors: " << others);
    CHECK(errors == 5);
  }
  server->join();
  CHECK(acceptFired == 1);
  int before = fired;
  // A chance for a late callback. A slower machine cannot fail this check
  // of nothing happening, only make it less sensitive.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(fired == before);
  // After join, operations fail at once instead of hanging.
  CHECK(writeSync(*pipe, Message(), std::chrono::seconds(5)));
  auto late = client->connect(listener->url("tcp"));
  CHECK(writeSync(*late, Message(), std::chrono::seconds(5)).isOfType<ContextClosedError>());
}

TEST_CASE("data written just before the peer exits is still delivered (tcp)") {
  Child child = Child::spawn([](Child& self) {
    auto context = makeContext("leaver");
    auto listener = context->listen({"tcp://127.0.0.1:0"});
    self.send(listener->url("tcp"));
    auto pipe = acceptSync(*listener);
    CHILD_CHECK(pipe != nullptr);
    Storage s;
    s.payloads.push_back(pattern(1000, 42));
    s.tensors.push_back(pattern(30000, 43));
    CHILD_CHECK(!writeSync(*pipe, messageOver(s, "last words")));
    ::_exit(0);  // no goodbye
    return 0;
  });
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = makeContext("client");
  auto pipe = context->connect(url);
  REQUIRE(child.wait() == 0);
  // The EOF arrives before we read. A slower machine cannot fail this: the
  // data comes first whenever the EOF is seen.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Received r = readSync(*pipe);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.descriptor.metadata == "last words");
  CHECK(r.storage.payloads[0] == pattern(1000, 42));
  CHECK(r.storage.tensors[0] == pattern(30000, 43));
  Received after = readSync(*pipe);
  CHECK(after.error.isOfType<EOFError>());
  // Writes to a peer that is gone fail, and say so.
  CHECK(writeSync(*pipe, Message()));
}

// Callbacks are the user's code: one that throws is reported (logged) and
// the pipe carries on; it never unwinds through the event loop's frames
// (libuv's C code, which would skip its own bookkeeping or end the process).
// Large messages so that writes complete in libuv's write callback and reads
// in its read callback, not in a task; then a small one over the same pipe.
TEST_CASE("a callback that throws is reported; the pipe and its loop carry on") {
  testing::LogLines lines;
  auto escaped = [&](const std::string& what) {
    return lines.count("an exception escaped " + what + ": thrown by");
  };
  for (const char* url : {"tcp://127.0.0.1:0", "shm://"}) {
    CAPTURE(url);
    lines.clear();
    auto server = makeContext("server");
    auto listener = server->listen({url});
    auto client = makeContext("client");
    std::string scheme = std::string(url).substr(0, 3);
    auto pipe = client->connect(listener->url(scheme));
    std::promise<std::shared_ptr<Pipe>> acceptedPromise;
    listener->accept([&](const Error& e, std::shared_ptr<Pipe> p) {
      acceptedPromise.set_value(e ? nullptr : p);
      throw std::runtime_error("thrown by an accept callback, on purpose");
    });
    auto acceptedFuture = acceptedPromise.get_future();
    REQUIRE(ready(acceptedFuture, std::chrono::seconds(10)));
    auto accepted = acceptedFuture.get();
    REQUIRE(accepted != nullptr);

    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      Storage s = makeStorage({8u << 20}, {8u << 20}, round);
      std::promise<void> wrote;
      pipe->write(messageOver(s, "big"), [&](const Error& e) {
        CHECK(!e);
        wrote.set_value();
        throw std::runtime_error("thrown by a write callback, on purpose");
      });
      std::promise<Descriptor> described;
      accepted->readDescriptor([&](const Error& e, Descriptor d) {
        CHECK(!e);
        described.set_value(std::move(d));
        throw std::runtime_error("thrown by a readDescriptor callback, on purpose");
      });
      auto describedFuture = described.get_future();
      REQUIRE(ready(describedFuture, std::chrono::seconds(20)));
      Storage got;
      Descriptor d = describedFuture.get();
      std::promise<void> read;
      accepted->read(allocate(d, got), [&](const Error& e) {
        CHECK(!e);
        read.set_value();
        throw std::runtime_error("thrown by a read callback, on purpose");
      });
      auto readFuture = read.get_future();
      auto wroteFuture = wrote.get_future();
      REQUIRE(ready(readFuture, std::chrono::seconds(20)));
      REQUIRE(ready(wroteFuture, std::chrono::seconds(20)));
      CHECK(got.payloads == s.payloads);
      CHECK(got.tensors == s.tensors);
    }
    Storage small = makeStorage({10}, {}, 9);
    REQUIRE(!writeSync(*pipe, messageOver(small, "after")));
    Received r = readSync(*accepted);
    REQUIRE(!r.error);
    CHECK(r.descriptor.metadata == "after");
    CHECK(r.storage.payloads == small.payloads);
    // The listener outlived its throwing callback: it still accepts.
    auto second = client->connect(listener->url(scheme));
    auto secondAccepted = acceptSync(*listener);
    REQUIRE(secondAccepted != nullptr);
    REQUIRE(!writeSync(*second, messageOver(small, "second")));
    CHECK(readSync(*secondAccepted).descriptor.metadata == "second");
    // Each went through the guard, once per call.
    CHECK(escaped("a listener's accept callback") == 1);
    CHECK(escaped("a pipe's write callback") == 3);
    CHECK(escaped("a pipe's readDescriptor callback") == 3);
    CHECK(escaped("a pipe's read callback") == 3);
  }
}
