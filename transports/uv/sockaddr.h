#pragma once
// Parsing and printing of uv addresses: "1.2.3.4:80", "[::1]:80", "host".
#include <string>

#include <sys/socket.h>

#include <actorpipe/runtime/error.h>

namespace actorpipe::transport::uv {

struct SockAddr {
  sockaddr_storage storage{};
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// Resolves names with getaddrinfo (blocking: call it off the loop thread).
Error parseAddress(const std::string& addr, SockAddr& out);
std::string formatAddress(const sockaddr* addr);

} // namespace actorpipe::transport::uv
