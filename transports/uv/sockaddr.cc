#include <actorpipe/transports/uv/sockaddr.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

namespace actorpipe::transport::uv {
namespace {

Error badAddress(const std::string& addr, const std::string& why) {
  return ACTORPIPE_ERROR(LogicError, "bad tcp address '" + addr + "': " + why);
}

}  // namespace

Error parseAddress(const std::string& addr, SockAddr& out) {
  std::string host;
  std::string port = "0";
  if (!addr.empty() && addr[0] == '[') {
    auto close = addr.find(']');
    if (close == std::string::npos) return badAddress(addr, "missing ']'");
    host = addr.substr(1, close - 1);
    if (close + 1 < addr.size()) {
      if (addr[close + 1] != ':') return badAddress(addr, "expected ':' after ']'");
      port = addr.substr(close + 2);
    }
  } else {
    auto colon = addr.rfind(':');
    // More than one ':' and no brackets: a bare IPv6 address, no port.
    if (colon != std::string::npos && addr.find(':') == colon) {
      host = addr.substr(0, colon);
      port = addr.substr(colon + 1);
    } else {
      host = addr;
    }
  }
  if (host.empty()) return badAddress(addr, "no host");
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      port.size() > 5 || std::stoul(port) > 65535) {
    return badAddress(addr, "port must be a number from 0 to 65535");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc == EAI_ADDRFAMILY || rc == EAI_NONAME) {
    hints.ai_flags = AI_NUMERICSERV;  // loopback-only hosts have no "configured" address
    rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  }
  if (rc != 0 || result == nullptr) {
    return badAddress(addr, std::string("cannot resolve host: ") + ::gai_strerror(rc));
  }
  std::memcpy(&out.storage, result->ai_addr, result->ai_addrlen);
  ::freeaddrinfo(result);
  return Error();
}

std::string formatAddress(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

} // namespace actorpipe::transport::uv
