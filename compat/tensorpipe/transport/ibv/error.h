#pragma once
// TensorPipe's <tensorpipe/transport/ibv/error.h>: actorpipe's own header under that path.
#include <actorpipe/transports/ibv/error.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
