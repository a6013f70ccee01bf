#pragma once
// One Device for the whole library: pipes' buffers and descriptors, and the
// actors' Tensor storage. Its type is a string ("cpu", "cuda") because that
// is TensorPipe's API and the wire's spelling.
#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include <actorpipe/runtime/fwd.h>

namespace actorpipe {
extern const std::string kCpuDeviceType;
extern const std::string kCudaDeviceType;
}  // namespace actorpipe

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

struct Device {
  std::string type;
  int index{0};

  Device() = default;
  Device(std::string type, int index) : type(std::move(type)), index(index) {}
  static Device cpu(int index = 0) { return Device(::actorpipe::kCpuDeviceType, index); }
  static Device cuda(int index) { return Device(::actorpipe::kCudaDeviceType, index); }
  bool isCpu() const { return type == ::actorpipe::kCpuDeviceType; }

  // "cpu:0", "cuda:1": also the spelling used on the wire.
  std::string toString() const;

  bool operator==(const Device& other) const {
    return type == other.type && index == other.index;
  }
  bool operator!=(const Device& other) const { return !(*this == other); }
  bool operator<(const Device& other) const {
    return type != other.type ? type < other.type : index < other.index;
  }
};

}  // namespace tensorpipe

// As in TensorPipe: Devices, and pairs of them (device maps), as keys of
// unordered containers.
namespace std {
template <>
struct hash<::actorpipe::Device> {
  size_t operator()(const ::actorpipe::Device& device) const noexcept {
    return hash<string>{}(device.type) * 31 + hash<int>{}(device.index);
  }
};
template <>
struct hash<pair<::actorpipe::Device, ::actorpipe::Device>> {
  size_t operator()(const pair<::actorpipe::Device, ::actorpipe::Device>& p) const noexcept {
    const hash<::actorpipe::Device> h;
    return h(p.first) * 1000003 ^ h(p.second);
  }
};
}  // namespace std
