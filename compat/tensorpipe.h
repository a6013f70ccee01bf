#pragma once
// Source compatibility with TensorPipe: code written against
// <tensorpipe/tensorpipe.h> builds against actorpipe with only its include
// changed to this header.
#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/transports/uv/factory.h>

namespace tensorpipe = actorpipe;
