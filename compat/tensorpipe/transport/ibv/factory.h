#pragma once
// TensorPipe's <tensorpipe/transport/ibv/factory.h>: actorpipe's own header under that path.
#include <actorpipe/transports/ibv/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
