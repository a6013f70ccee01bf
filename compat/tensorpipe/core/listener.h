#pragma once
// TensorPipe's <tensorpipe/core/listener.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/listener.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
