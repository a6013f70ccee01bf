#pragma once
// Helpers shared by the fault tests: raw sockets that play a misbehaving
// peer, a tcp-only context, memory readings, and a check that a Context
// still carries other pipes after a fault.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <actorpipe/runtime/detail/wire.h>

#include "../support/harness.h"

namespace faults {

using namespace actorpipe;
using namespace testing;
using Clock = std::chrono::steady_clock;

// uv + basic only: pipes between two such contexts stay on TCP.
inline std::shared_ptr<Context> tcpContext(const std::string& name, ContextOptions options = {}) {
  auto context = std::make_shared<Context>(options.name(name));
  context->registerTransport(0, "tcp", transport::uv::create());
  context->registerChannel(0, "basic", channel::basic::create());
  return context;
}

// A seed for the random choices of a test: ACTORPIPE_FAULT_SEED or the clock.
inline unsigned faultSeed() {
  if (const char* s = std::getenv("ACTORPIPE_FAULT_SEED")) return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  return static_cast<unsigned>(Clock::now().time_since_epoch().count());
}

// Resident memory of this process in bytes (VmRSS), from /proc.
inline size_t residentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Errors that mean "the test's own wait gave up": a hang, not a failure.
inline bool isTestTimeout(const Error& e) {
  return e.isOfType<LogicError>() && e.what().find("test timeout") != std::string::npos;
}

// A plain TCP server socket on loopback, for playing a misbehaving peer.
struct RawServer {
  int fd{-1};
  int port{0};
  RawServer() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd, 16);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~RawServer() { ::close(fd); }
  int accept() { return ::accept(fd, nullptr, nullptr); }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port); }
};

inline int rawConnect(const std::string& url) {
  int port = std::stoi(url.substr(url.rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

inline void sendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Closes with SO_LINGER 0: the peer gets a RST instead of a FIN.
inline void resetClose(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

// Reads one whole frame (header + body) from a raw socket; "" on EOF.
inline std::string recvFrame(int fd) {
  std::string header(wire::kHeaderSize, '\0');
  size_t got = 0;
  while (got < header.size()) {
    ssize_t n = ::recv(fd, &header[got], header.size() - got, 0);
    if (n <= 0) return "";
    got += static_cast<size_t>(n);
  }
  uint32_t length = 0;
  for (int i = 0; i < 4; ++i) length |= uint32_t(uint8_t(header[4 + i])) << (8 * i);
  std::string body(length, '\0');
  got = 0;
  while (got < length) {
    ssize_t n = ::recv(fd, &body[got], length - got, 0);
    if (n <= 0) return "";
    got += static_cast<size_t>(n);
  }
  return header + body;
}

inline std::string frame(wire::FrameType type, const std::string& body) {
  return wire::encodeHeader(type, body.size()) + body;
}

inline std::string welcomeFrame() {
  wire::Welcome w;
  w.contextName = "raw";
  w.transport = "tcp";
  w.channels.emplace_back(kCpuDeviceType, "basic");
  return frame(wire::FrameType::kWelcome, wire::encode(w));
}

// A new pipe through `context` (to a listener of its own) carries a
// message with a payload and a tensor, byte for byte.
inline void checkUsable(Context& context) {
  auto listener = context.listen({"tcp://127.0.0.1:0"});
  auto pipe = context.connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  Storage s;
  s.payloads.push_back(pattern(1000, 3));
  s.tensors.push_back(pattern(100000, 4));
  // Pulled tensors (cma, xth) complete their write once the reader copied
  // them: read while the write is pending.
  auto written = std::make_shared<std::promise<Error>>();
  pipe->write(messageOver(s, "still usable"), [written](const Error& e) { written->set_value(e); });
  Received got = readSync(*accepted);
  INFO("read: " << got.error.what() << "; transport " << pipe->info().transport);
  REQUIRE(!got.error);
  auto w = written->get_future();
  REQUIRE(ready(w, std::chrono::seconds(20)));
  Error writeError = w.get();
  INFO("write: " << writeError.what());
  REQUIRE(!writeError);
  CHECK(got.descriptor.metadata == "still usable");
  CHECK(got.storage.payloads == s.payloads);
  CHECK(got.storage.tensors == s.tensors);
  pipe->close();
  accepted->close();
  listener->close();
}

}  // namespace faults
