#pragma once
// The uv transport: TCP over libuv, IPv4 and IPv6. Addresses are "host:port",
// "[v6]:port", or a bare host (port 0 binds an ephemeral port).
#include <memory>

#include <actorpipe/transports/context.h>

namespace actorpipe::transport::uv {

std::shared_ptr<Context> create();

} // namespace actorpipe::transport::uv
