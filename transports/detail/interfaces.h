#pragma once
// This host's interface addresses, and the address choices TensorPipe's
// transports offer (uv/utility.h, ibv/utility.h) built on them.
#include <sys/socket.h>

#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/optional.h>

namespace actorpipe::detail {

struct InterfaceAddress {
  std::string interface;
  sockaddr_storage address{};  // port 0
  bool linkLocal{false};       // IPv6 fe80::/10: useless without a scope id
};

// Every IPv4 and IPv6 address of an interface that is up, in the kernel's order.
Error listInterfaceAddresses(std::vector<InterfaceAddress>& out);

// "10.0.0.5:0", "[2001:db8::5]:0".
std::string formatWithPortZero(const sockaddr_storage& address);

// What a lookup found: an address, a failure, or (notFound non-empty, the
// reason) nothing that fits, which each transport reports as its own
// NoAddrFoundError.
struct Lookup {
  Error error;
  std::string address;
  std::string notFound;
  int gaiError{0};  // getaddrinfo's code when the host name did not resolve
};
Lookup addressOfInterface(const std::string& iface);
Lookup addressOfHostname();
Lookup addressLikeNccl(optional<sa_family_t> familyFilter);

} // namespace actorpipe::detail
