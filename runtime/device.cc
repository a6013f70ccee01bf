#include <actorpipe/runtime/buffer.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe {

const std::string kCpuDeviceType{"cpu"};
const std::string kCudaDeviceType{"cuda"};

}  // namespace actorpipe

namespace tensorpipe {

std::string Device::toString() const { return type + ":" + std::to_string(index); }

// Without CUDA support compiled in, nothing can ask the driver where the
// pointer lives: the caller says (deviceIndex) or it reads as device 0.
Device CudaBuffer::getDevice() const {
  return Device{::actorpipe::kCudaDeviceType, deviceIndex >= 0 ? deviceIndex : 0};
}

}  // namespace tensorpipe
