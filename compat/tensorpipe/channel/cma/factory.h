#pragma once
// TensorPipe's <tensorpipe/channel/cma/factory.h>: actorpipe's own header under that path.
#include <actorpipe/channels/cma/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
