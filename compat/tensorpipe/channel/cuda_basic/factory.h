#pragma once
// TensorPipe's <tensorpipe/channel/cuda_basic/factory.h>: actorpipe's own header under that path.
#include <actorpipe/channels/cuda_basic/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
