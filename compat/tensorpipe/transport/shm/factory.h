#pragma once
// TensorPipe's <tensorpipe/transport/shm/factory.h>: actorpipe's own header under that path.
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
