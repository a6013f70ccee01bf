#pragma once
// TensorPipe's <tensorpipe/core/error.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/error.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
