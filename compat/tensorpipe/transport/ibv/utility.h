#pragma once
// TensorPipe's <tensorpipe/transport/ibv/utility.h>: actorpipe's own header under that path.
#include <actorpipe/transports/ibv/utility.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
