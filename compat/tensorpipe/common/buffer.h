#pragma once
// TensorPipe's <tensorpipe/common/buffer.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/buffer.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
