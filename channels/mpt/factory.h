#pragma once
// The mpt channel ("multiplexed transport"): each CPU tensor is cut into
// chunks that travel in parallel over several lanes, one connection per lane
// per pipe, each lane from its own transport context (so its own loop
// thread). Worth it where one connection cannot fill the link or one thread
// cannot keep up with one socket.
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/channels/context.h>
#include <actorpipe/transports/context.h>

namespace actorpipe::channel::mpt {

// TensorPipe's form: one transport context and one listener per lane. The
// listeners must already listen; peers connect to their addresses.
std::shared_ptr<Context> create(std::vector<std::shared_ptr<transport::Context>> contexts,
                                std::vector<std::shared_ptr<transport::Listener>> listeners);

// The convenient form: `lanes` uv (TCP) lanes listening on `host`.
std::shared_ptr<Context> create(size_t lanes = 2, const std::string& host = "127.0.0.1");

} // namespace actorpipe::channel::mpt
