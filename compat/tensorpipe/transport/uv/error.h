#pragma once
// TensorPipe's <tensorpipe/transport/uv/error.h>: actorpipe's own header under that path.
#include <actorpipe/transports/uv/error.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
