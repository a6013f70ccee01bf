#pragma once
// TensorPipe's <tensorpipe/transport/uv/utility.h>: actorpipe's own header under that path.
#include <actorpipe/transports/uv/utility.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
