#pragma once
// TensorPipe's <tensorpipe/common/optional.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/optional.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
