#pragma once
// TensorPipe's CUDA build configuration, as its users test it. cuda_ipc is
// compiled into every build of actorpipe (it is offered only where CUDA
// support was built and the driver shows a GPU: docs/cuda.md), and so are
// cuda_xth and cuda_basic, which TensorPipe always has. cuda_gdr does not
// exist (TENSORPIPE_HAS_CUDA_GDR_CHANNEL stays undefined, as in a TensorPipe
// built without it: docs/tensorpipe-compat.md).
#define TENSORPIPE_HAS_CUDA_IPC_CHANNEL 1
