#pragma once
// TensorPipe's <tensorpipe/channel/basic/factory.h>: actorpipe's own header under that path.
#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
