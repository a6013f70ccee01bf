#pragma once
#include <string>

namespace actorpipe {

extern const std::string kCpuDeviceType;
extern const std::string kCudaDeviceType;

struct Device {
  std::string type;
  int index{0};

  Device() = default;
  Device(std::string type, int index) : type(std::move(type)), index(index) {}

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

} // namespace actorpipe
