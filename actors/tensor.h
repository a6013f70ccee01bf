#pragma once

// A tensor value for the actor layer.
//
// A Tensor is a *handle*: dtype, shape, device and a shared reference to its
// storage. Copying or moving a Tensor (into a CAF message, a channel, a
// workqueue, a lambda capture) never touches the data; it bumps a reference
// count. The only way to duplicate the bytes is the explicit `clone()`. That
// makes the zero-copy path the default and an accidental deep copy something
// one has to spell out, which matters because CAF messages are copy-on-write:
// a message that gets copied only copies handles.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <actorpipe/runtime/device.h>  // the one Device, also the pipes'

namespace caf {
class deserializer;
class error;
class serializer;
} // namespace caf

namespace actorpipe {

enum class DType : std::uint8_t { kFloat32, kFloat64, kInt32, kInt64, kUint8 };

std::size_t dtypeSize(DType dtype);
const char* dtypeName(DType dtype);
// The inverse of dtypeName; false for any other text.
bool dtypeFromName(const std::string& name, DType& dtype);

template <class T>
constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::kFloat32; }
template <> constexpr DType dtypeOf<double>() { return DType::kFloat64; }
template <> constexpr DType dtypeOf<std::int32_t>() { return DType::kInt32; }
template <> constexpr DType dtypeOf<std::int64_t>() { return DType::kInt64; }
template <> constexpr DType dtypeOf<std::uint8_t>() { return DType::kUint8; }

// A block of device memory, shared by every tensor that views it. Not
// copyable: storage is only ever shared through std::shared_ptr.
class Storage {
public:
  using Deleter = std::function<void(void*)>;

  // Host memory, 64-byte aligned, uninitialised.
  static std::shared_ptr<Storage> allocateCpu(std::size_t nbytes);

  // Takes ownership of memory allocated elsewhere, e.g. by cudaMalloc; the
  // deleter runs when the last tensor lets go. This is how CUDA storage
  // enters without this library depending on CUDA. The deleter must not
  // throw: it runs in a destructor, where a throw ends the process.
  static std::shared_ptr<Storage> adopt(void* data, std::size_t nbytes,
                                        Device device, Deleter deleter);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

private:
  Storage(void* data, std::size_t nbytes, Device device, Deleter deleter);

  void* data_;
  std::size_t nbytes_;
  Device device_;
  Deleter deleter_;
};

using Shape = std::vector<std::int64_t>;

std::int64_t elementCount(const Shape& shape);
std::string shapeToString(const Shape& shape);

class Tensor {
public:
  // An undefined tensor (no storage), useful as a placeholder.
  Tensor() = default;

  // Host tensors; other devices need `fromStorage` with adopted memory,
  // or the device overload of `empty`.
  static Tensor empty(Shape shape, DType dtype);
  // A tensor in the memory of `device`: the host, or a CUDA device
  // (cudaMalloc'ed through runtime/cuda.h, freed when the last tensor
  // viewing it lets go). Throws std::runtime_error saying why where that
  // device has no memory to give (no CUDA support, no such device).
  static Tensor empty(Shape shape, DType dtype, Device device);
  static Tensor zeros(Shape shape, DType dtype);
  template <class T>
  static Tensor full(Shape shape, T value);

  // A view on existing storage; throws if it does not fit.
  static Tensor fromStorage(std::shared_ptr<Storage> storage, Shape shape,
                             DType dtype, std::size_t byteOffset = 0);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::size_t dim() const { return shape_.size(); }
  std::int64_t numel() const { return elementCount(shape_); }
  std::size_t nbytes() const;
  Device device() const;

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::size_t byteOffset() const { return byteOffset_; }
  // Address of the first element, whatever the device.
  void* rawData() const;
  bool sharesStorageWith(const Tensor& other) const {
    return storage_ && storage_ == other.storage_;
  }

  // Typed host access; throws on a dtype or device mismatch.
  template <class T>
  T* data() const {
    checkHostAccess(dtypeOf<T>());
    return static_cast<T*>(rawData());
  }

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;

  // The one deliberate deep copy, on the same device.
  Tensor clone() const;
  // This tensor on `device`: itself where it is there already (as
  // PyTorch's `to`), else a copy (host to device, device to host, device to
  // device), finished when this returns. Throws std::runtime_error where the
  // copy cannot be made.
  Tensor to(Device device) const;

  std::string toString() const;

private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype,
         std::size_t byteOffset);
  void checkHostAccess(DType requested) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  std::size_t byteOffset_ = 0;
};

template <class T>
Tensor Tensor::full(Shape shape, T value) {
  Tensor result = empty(std::move(shape), dtypeOf<T>());
  auto* first = result.data<T>();
  for (std::int64_t i = 0, n = result.numel(); i < n; ++i)
    first[i] = value;
  return result;
}

// A Tensor in a CAF message that goes to another node (actors/remote):
// its bytes are not encoded with the message but travel as a pipe tensor on
// the negotiated channel; these write and read its place in the message's
// tensor list. Anywhere else (CAF's own middleman) they fail.
caf::error inspect(caf::serializer& sink, Tensor& tensor);
caf::error inspect(caf::deserializer& source, Tensor& tensor);
std::string to_string(const Tensor& tensor);

} // namespace actorpipe
