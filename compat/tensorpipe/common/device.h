#pragma once
// TensorPipe's <tensorpipe/common/device.h>: actorpipe's own header under that path.
#include <actorpipe/runtime/device.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
