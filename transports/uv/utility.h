#pragma once
// Finding this host's own address to listen on, as TensorPipe's uv utility
// does. Each returns an address the uv transport listens on and a peer can
// connect to ("10.0.0.5:0", "[2001:db8::5]:0": port 0 binds an ephemeral
// port), or an error (uv::NoAddrFoundError when nothing fits).
#include <string>
#include <tuple>

#include <sys/socket.h>

#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/optional.h>

namespace actorpipe::transport::uv {

// The first IPv4 address of interface `iface` (else its first IPv6 address
// that is not link-local): "eth0", "ib0".
std::tuple<Error, std::string> lookupAddrForIface(std::string iface);

// The first address the host's name resolves to that this host can bind.
std::tuple<Error, std::string> lookupAddrForHostname();

// NCCL's choice: the first usable address of an interface whose name starts
// with "ib", else of any interface but "docker*" and "lo*", else of
// "docker*", else of "lo*"; only of `familyFilter` (AF_INET, AF_INET6) when
// given. Link-local IPv6 addresses are never chosen (they need a scope).
std::tuple<Error, std::string> lookupAddrLikeNccl(optional<sa_family_t> familyFilter = nullopt);

} // namespace actorpipe::transport::uv
