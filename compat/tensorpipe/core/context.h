#pragma once
// TensorPipe's <tensorpipe/core/context.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/context.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
