#pragma once
// The cuda_basic channel: CUDA tensors to any peer, over the pipe's own
// connection. The sender copies each chunk of the tensor into pinned host
// memory on the tensor's stream, the connection carries it, the receiver
// copies it into its tensor on its buffer's stream; the device copies of
// one chunk overlap the connection's moving of the next (the pipe's side:
// actors/detail/pipe_staging.cc; the copies: channels/detail/cuda_stager.h).
// Slower than cuda_ipc or cuda_xth where those can be chosen (it crosses
// host memory twice), it works wherever the pipe does: across hosts, over
// tcp, between processes that cannot share CUDA memory. Offered where
// actorpipe was built with CUDA and the driver shows a GPU.
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::cuda_basic {

std::shared_ptr<Context> create();
// TensorPipe's form: its cuda_basic sends the host copies on the CPU
// channel given; here they ride the pipe's connection, and the CPU channel
// is kept only so that code written for TensorPipe compiles unchanged.
std::shared_ptr<Context> create(std::shared_ptr<Context> cpuContext);

} // namespace actorpipe::channel::cuda_basic
