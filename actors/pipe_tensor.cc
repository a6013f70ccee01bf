#include <actorpipe/actors/pipe_tensor.h>

#include <cstdint>

namespace actorpipe {
namespace {

// "apT1 float32 2,3;" then the writer's metadata. Version 1 of the form;
// the extents are decimal, outermost first; a scalar has none ("apT1 int64 ;").
const std::string kPrefix = "apT1 ";
constexpr int64_t kMaxExtent = int64_t{1} << 62;

Error bad(const std::string& why) { return ACTORPIPE_ERROR(ProtocolError, "tensor metadata: " + why); }

}  // namespace

Message::Tensor pipeTensor(const Tensor& tensor, const std::string& metadata) {
  std::string head = kPrefix + dtypeName(tensor.dtype()) + " ";
  for (size_t i = 0; i < tensor.shape().size(); ++i) {
    head += (i ? "," : "") + std::to_string(tensor.shape()[i]);
  }
  head += ";";
  Message::Tensor entry;
  const Device device = tensor.device();
  if (device.isCpu()) {
    entry.buffer = CpuBuffer{tensor.rawData()};
  } else {
    entry.buffer = CudaBuffer{tensor.rawData(), nullptr, device.index};
  }
  entry.length = tensor.nbytes();
  entry.metadata = head + metadata;
  return entry;
}

bool isPipeTensor(const Descriptor::Tensor& entry) { return entry.metadata.compare(0, kPrefix.size(), kPrefix) == 0; }

Error parsePipeTensor(const Descriptor::Tensor& entry, DType& dtype, Shape& shape, std::string* metadata) {
  const std::string& m = entry.metadata;
  if (!isPipeTensor(entry)) return bad("not written by pipeTensor()");
  size_t pos = kPrefix.size();
  const size_t space = m.find(' ', pos);
  if (space == std::string::npos || space - pos > 16) return bad("no dtype");
  if (!dtypeFromName(m.substr(pos, space - pos), dtype)) return bad("unknown dtype");
  pos = space + 1;
  const size_t end = m.find(';', pos);
  if (end == std::string::npos) return bad("no ';' after the shape");
  Shape parsed;
  uint64_t elements = 1;
  int64_t nonZero = 1;
  while (pos < end) {
    if (parsed.size() == kMaxTensorDims) return bad("more than " + std::to_string(kMaxTensorDims) + " extents");
    size_t digits = 0;
    int64_t extent = 0;
    while (pos < end && m[pos] >= '0' && m[pos] <= '9') {
      const int digit = m[pos] - '0';
      // Checked before it can overflow (the fuzzer found 19 digits that did).
      if (extent > (kMaxExtent - digit) / 10) return bad("an extent too large");
      extent = extent * 10 + digit;
      ++digits;
      ++pos;
    }
    if (digits == 0) return bad("an extent that is not a number");
    // The product of the non-zero extents must fit an int64 (Tensor's
    // element count), even where a zero extent makes the tensor empty.
    if (extent != 0 && (__builtin_mul_overflow(nonZero, extent, &nonZero))) {
      return bad("a shape whose size overflows");
    }
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(extent), &elements)) {
      return bad("a shape whose size overflows");
    }
    parsed.push_back(extent);
    if (pos < end) {
      if (m[pos] != ',') return bad("extents must be separated by ','");
      if (++pos == end) return bad("a ',' with no extent after it");
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dtypeSize(dtype)), &bytes) ||
      bytes != entry.length) {
    return bad("shape and dtype give " + std::to_string(elements) + " elements, the entry has " +
               std::to_string(entry.length) + " bytes");
  }
  shape = std::move(parsed);
  if (metadata != nullptr) *metadata = m.substr(end + 1);
  return Error();
}

Error receiveTensor(const Descriptor::Tensor& entry, Tensor& out, Allocation::Tensor& allocation,
                    std::string* metadata) {
  DType dtype;
  Shape shape;
  if (Error e = parsePipeTensor(entry, dtype, shape, metadata)) return e;
  // A tensor lands on a device of the type it left from (the pipe's rule:
  // that type's channel moves it); on the writer's target device if it
  // named one, else on the device of the same index here. The index is the
  // peer's word: a device this host lacks fails the allocation, clearly.
  const Device& source = entry.sourceDevice;
  const Device device = entry.targetDevice ? *entry.targetDevice : source;
  if (device.type != source.type) {
    return ACTORPIPE_ERROR(LogicError, "a tensor from " + source.toString() + " cannot land on " + device.toString() +
                                           " (it lands on a device of the type it left from)");
  }
  if (!device.isCpu() && device.type != kCudaDeviceType) {
    return ACTORPIPE_ERROR(LogicError, "receiveTensor has no memory for tensors on " + device.toString());
  }
  const bool sameDevice = device.isCpu() ? out.device().isCpu() : out.device() == device;
  const bool reuse = out.defined() && sameDevice && out.dtype() == dtype && out.shape() == shape;
  if (!reuse) {
    if (device.isCpu()) {
      out = Tensor::empty(shape, dtype);
    } else {
      try {
        out = Tensor::empty(shape, dtype, device);
      } catch (const std::exception& e) {
        return ACTORPIPE_ERROR(CudaError, "receiveTensor", e.what(), 0);
      }
    }
  }
  if (device.isCpu()) {
    allocation.buffer = CpuBuffer{out.rawData()};
  } else {
    allocation.buffer = CudaBuffer{out.rawData(), nullptr, device.index};
  }
  return Error();
}

} // namespace actorpipe
