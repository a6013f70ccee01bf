#pragma once
// The cuda_xth channel: CUDA tensors between two pipes of one process. The
// receiver's stream waits for the sender's (an event), then copies the
// tensor device to device straight into the receiver's allocation
// (channels/detail/cuda_endpoint.h). Offered where actorpipe was built with
// CUDA and a device is there; elsewhere isViable() is false.
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::cuda_xth {

std::shared_ptr<Context> create();

} // namespace actorpipe::channel::cuda_xth
