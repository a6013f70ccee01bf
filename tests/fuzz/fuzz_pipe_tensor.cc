// A received tensor entry's metadata (actors/pipe_tensor.h), as a hostile
// writer may set it, with the length its descriptor announced. What parses
// must describe exactly that many bytes, and a Tensor of that dtype and
// shape must encode to metadata that parses the same.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <actorpipe/actors/pipe_tensor.h>

using namespace actorpipe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t length = 0;
  std::memcpy(&length, data, 8);
  // Mostly small lengths (so that tensors can be made), sometimes any.
  if ((length >> 63) == 0) length %= 4096;
  Descriptor::Tensor entry;
  entry.length = length;
  entry.sourceDevice = Device::cpu();
  entry.metadata.assign(reinterpret_cast<const char*>(data + 8), size - 8);
  DType dtype;
  Shape shape;
  std::string mine;
  if (parsePipeTensor(entry, dtype, shape, &mine)) return 0;
  if (shape.size() > kMaxTensorDims) std::abort();
  uint64_t elements = 1;
  for (auto extent : shape) {
    if (extent < 0) std::abort();
    elements *= static_cast<uint64_t>(extent);
  }
  if (elements * dtypeSize(dtype) != length) std::abort();
  if (length > 4096) return 0;
  Tensor t = Tensor::empty(shape, dtype);
  Message::Tensor again = pipeTensor(t, mine);
  Descriptor::Tensor back;
  back.length = again.length;
  back.metadata = again.metadata;
  DType d2;
  Shape s2;
  std::string m2;
  if (parsePipeTensor(back, d2, s2, &m2) || d2 != dtype || s2 != shape || m2 != mine) std::abort();
  return 0;
}
