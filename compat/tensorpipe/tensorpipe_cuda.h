#pragma once
// TensorPipe's <tensorpipe/tensorpipe_cuda.h>: its CUDA channels and
// CudaBuffer, those actorpipe has (config_cuda.h says which).
#include <actorpipe/compat/tensorpipe/config_cuda.h>

#include <actorpipe/channels/cuda_basic/factory.h>
#include <actorpipe/channels/cuda_ipc/factory.h>
#include <actorpipe/channels/cuda_xth/factory.h>
#include <actorpipe/runtime/buffer.h>

#include <actorpipe/compat/tensorpipe/detail/namespace.h>
