#pragma once
// Source compatibility with TensorPipe: code written against
// <tensorpipe/tensorpipe.h> builds against actorpipe with only its include
// changed to this header. Like TensorPipe's umbrella header it brings every
// transport and channel (TensorPipe's CUDA channels only with CUDA; actorpipe
// has none yet).
#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/cma/factory.h>
#include <actorpipe/channels/mpt/factory.h>
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/transports/ibv/factory.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

namespace tensorpipe = actorpipe;
