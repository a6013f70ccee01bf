#pragma once
// TensorPipe's <tensorpipe/channel/xth/factory.h>: actorpipe's own header under that path.
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
