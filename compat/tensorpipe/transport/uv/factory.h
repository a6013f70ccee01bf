#pragma once
// TensorPipe's <tensorpipe/transport/uv/factory.h>: actorpipe's own header under that path.
#include <actorpipe/transports/uv/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
