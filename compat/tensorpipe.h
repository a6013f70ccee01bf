#pragma once
// Source compatibility with TensorPipe: code written against
// <tensorpipe/tensorpipe.h> builds against actorpipe with only its include
// changed to this header, or unchanged when compat/ is on the include path
// (CMake target actorpipe::tensorpipe: <tensorpipe/tensorpipe.h>,
// <tensorpipe/core/pipe.h>, <tensorpipe/config.h>, ... exist there). Like
// TensorPipe's umbrella header it brings every transport and channel and
// TensorPipe's TENSORPIPE_HAS_* macros. As in TensorPipe, the CUDA channels
// come with <tensorpipe/tensorpipe_cuda.h> (compat/tensorpipe/tensorpipe_cuda.h).
#include <actorpipe/compat/tensorpipe/config.h>

#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/cma/factory.h>
#include <actorpipe/channels/mpt/factory.h>
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/runtime/buffer.h>
#include <actorpipe/runtime/optional.h>
#include <actorpipe/transports/ibv/error.h>
#include <actorpipe/transports/ibv/factory.h>
#include <actorpipe/transports/ibv/utility.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/error.h>
#include <actorpipe/transports/uv/factory.h>
#include <actorpipe/transports/uv/utility.h>

#include <actorpipe/compat/tensorpipe/detail/namespace.h>
