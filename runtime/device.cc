#include <actorpipe/runtime/buffer.h>
#include <actorpipe/runtime/cuda.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe {

const std::string kCpuDeviceType{"cpu"};
const std::string kCudaDeviceType{"cuda"};

}  // namespace actorpipe

namespace tensorpipe {

std::string Device::toString() const { return type + ":" + std::to_string(index); }

// When the caller did not say (deviceIndex -1) and actorpipe has started
// CUDA, the runtime says where the pointer lives; otherwise it reads as
// device 0 (naming a buffer never starts CUDA: the CUDA channels ask the
// runtime themselves before they copy).
Device CudaBuffer::getDevice() const {
  int index = deviceIndex >= 0 ? deviceIndex
                               : (::actorpipe::cuda::started() ? ::actorpipe::cuda::deviceOf(ptr) : -1);
  return Device{::actorpipe::kCudaDeviceType, index >= 0 ? index : 0};
}

}  // namespace tensorpipe
