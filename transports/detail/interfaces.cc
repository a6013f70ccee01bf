#include <actorpipe/transports/detail/interfaces.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace actorpipe::detail {
namespace {

bool startsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// Whether a socket of this family can bind the address here (a name may
// resolve to an address of another host, or of a family we cannot use).
bool canBind(const sockaddr* address, socklen_t length) {
  const int fd = ::socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::bind(fd, address, length) == 0;
  ::close(fd);
  return ok;
}

socklen_t lengthOf(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

}  // namespace

Error listInterfaceAddresses(std::vector<InterfaceAddress>& out) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return ACTORPIPE_ERROR(SystemError, "getifaddrs", errno);
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0 || i->ifa_name == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress entry;
    entry.interface = i->ifa_name;
    if (family == AF_INET) {
      std::memcpy(&entry.address, i->ifa_addr, sizeof(sockaddr_in));
      reinterpret_cast<sockaddr_in*>(&entry.address)->sin_port = 0;
    } else {
      std::memcpy(&entry.address, i->ifa_addr, sizeof(sockaddr_in6));
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&entry.address);
      in6->sin6_port = 0;
      entry.linkLocal = IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr);
    }
    out.push_back(std::move(entry));
  }
  ::freeifaddrs(list);
  return Error();
}

std::string formatWithPortZero(const sockaddr_storage& address) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&address)->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":0";
  }
  ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr, buf, sizeof(buf));
  return "[" + std::string(buf) + "]:0";
}

Lookup addressOfInterface(const std::string& iface) {
  std::vector<InterfaceAddress> all;
  if (Error e = listInterfaceAddresses(all)) return {e, "", ""};
  const InterfaceAddress* v6 = nullptr;
  bool exists = false;
  for (const auto& a : all) {
    if (a.interface != iface) continue;
    exists = true;
    if (a.address.ss_family == AF_INET) return {Error(), formatWithPortZero(a.address), ""};
    if (v6 == nullptr && !a.linkLocal) v6 = &a;
  }
  if (v6 != nullptr) return {Error(), formatWithPortZero(v6->address), ""};
  return {Error(), "",
          exists ? "interface " + iface + " has no usable address"
                 : "no interface named " + iface + " is up"};
}

Lookup addressOfHostname() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return {ACTORPIPE_ERROR(SystemError, "gethostname", errno), "", ""};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(name, nullptr, &hints, &result);
  if (rc != 0) {
    return {Error(), "", std::string("host name ") + name + " does not resolve: " + ::gai_strerror(rc), rc};
  }
  std::string found;
  for (addrinfo* r = result; r != nullptr && found.empty(); r = r->ai_next) {
    if (r->ai_family != AF_INET && r->ai_family != AF_INET6) continue;
    sockaddr_storage a{};
    std::memcpy(&a, r->ai_addr, r->ai_addrlen);
    if (a.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr)) continue;
    if (canBind(reinterpret_cast<const sockaddr*>(&a), lengthOf(a))) found = formatWithPortZero(a);
  }
  ::freeaddrinfo(result);
  if (found.empty()) return {Error(), "", std::string("no address of host name ") + name + " can be bound here"};
  return {Error(), found, ""};
}

Lookup addressLikeNccl(optional<sa_family_t> familyFilter) {
  std::vector<InterfaceAddress> all;
  if (Error e = listInterfaceAddresses(all)) return {e, "", ""};
  // NCCL's order of preference: InfiniBand, then anything but docker and
  // loopback, then docker, then loopback.
  auto rank = [](const std::string& name) {
    if (startsWith(name, "ib")) return 0;
    if (startsWith(name, "docker")) return 2;
    if (startsWith(name, "lo")) return 3;
    return 1;
  };
  for (int wanted = 0; wanted <= 3; ++wanted) {
    for (const auto& a : all) {
      if (rank(a.interface) != wanted || a.linkLocal) continue;
      if (familyFilter && a.address.ss_family != *familyFilter) continue;
      return {Error(), formatWithPortZero(a.address), ""};
    }
  }
  return {Error(), "", familyFilter ? "no interface has an address of the family asked for"
                                    : "no interface has a usable address"};
}

} // namespace actorpipe::detail
