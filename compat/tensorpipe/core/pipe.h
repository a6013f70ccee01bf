#pragma once
// TensorPipe's <tensorpipe/core/pipe.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
