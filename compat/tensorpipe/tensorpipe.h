#pragma once
// TensorPipe's umbrella header at its own path: code written for TensorPipe
// builds against actorpipe with its includes unchanged (or with
// <actorpipe/compat/tensorpipe.h>, the same thing).
#include <actorpipe/compat/tensorpipe/config.h>

#include <actorpipe/compat/tensorpipe.h>
