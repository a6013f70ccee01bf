#pragma once

// Lets actorpipe::Tensor travel in CAF messages.
//
// Tensors are handles, so a message holding one carries a reference to the
// storage, never the bytes: copy-on-write of the message only copies the
// handle. A Tensor sent to an actor on another node travels as a pipe
// tensor (actors/remote/node.h; its inspect() is in actors/tensor.h).
// Kept for code that includes it; tensor.h is enough.

#include <actorpipe/actors/tensor.h>
