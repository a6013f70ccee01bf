#pragma once
// TensorPipe's <tensorpipe/common/cuda_buffer.h>: CudaBuffer is actorpipe's.
#include <actorpipe/runtime/buffer.h>
#include <actorpipe/compat/tensorpipe/detail/namespace.h>
