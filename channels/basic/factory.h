#pragma once
// The basic channel: CPU tensors travel inline on the pipe's own transport
// connection, read straight into the reader's allocation. Works wherever the
// transport does.
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::basic {

std::shared_ptr<Context> create();

} // namespace actorpipe::channel::basic
