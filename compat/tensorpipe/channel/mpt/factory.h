#pragma once
// TensorPipe's <tensorpipe/channel/mpt/factory.h>: actorpipe's own header under that path.
#include <actorpipe/channels/mpt/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
