#pragma once
// TensorPipe's <tensorpipe/transport/context.h>: actorpipe's own header under that path.
#include <actorpipe/transports/context.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
