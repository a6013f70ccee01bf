#pragma once
// TensorPipe's <tensorpipe/channel/error.h>: actorpipe's own header under that path.
#include <actorpipe/channels/context.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
