#pragma once
// TensorPipe's <tensorpipe/core/message.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/message.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
