#pragma once
// The cuda_ipc channel: CUDA tensors between two processes of one host. The
// receiver maps the sender's allocation (a CUDA IPC memory handle, cached,
// the tensor's offset applied), waits for the sender's IPC event by polling
// it, and copies device to device straight into its allocation; it then
// acknowledges through a page of the sender's that it opens in the process
// the kernel names (channels/detail/cuda_endpoint.h). So it is chosen only
// over a transport that can name the peer process (shm), between processes
// of one boot, user and pid namespace, where actorpipe was built with CUDA
// and a device is there.
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::cuda_ipc {

std::shared_ptr<Context> create();

} // namespace actorpipe::channel::cuda_ipc
