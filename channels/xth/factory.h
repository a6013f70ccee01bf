#pragma once
// The xth channel: both ends in one process. The receiver copies the
// sender's tensor straight into its allocation (one memcpy, no intermediate
// buffer, no system call).
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::xth {

std::shared_ptr<Context> create();

} // namespace actorpipe::channel::xth
