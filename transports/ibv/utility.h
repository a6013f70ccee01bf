#pragma once
// The address to give the ibv transport (its bootstrap listens there), as
// TensorPipe's ibv utility finds it. Same choices as uv/utility.h; errors
// are ibv's kinds (ibv::NoAddrFoundError, ibv::GetaddrinfoError).
#include <string>
#include <tuple>

#include <actorpipe/runtime/error.h>

namespace actorpipe::transport::ibv {

std::tuple<Error, std::string> lookupAddrForIface(std::string iface);
std::tuple<Error, std::string> lookupAddrForHostname();

} // namespace actorpipe::transport::ibv
