#pragma once
// Raw sockets that play a misbehaving peer: a server that speaks bytes of
// our choosing, a client likewise, and the frames to send.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <actorpipe/runtime/detail/wire.h>
#include <actorpipe/runtime/device.h>

namespace testing {

using namespace actorpipe;

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

} // namespace testing
