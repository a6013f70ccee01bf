#pragma once
// Buffers name memory a pipe reads from or writes into. `Buffer` erases the
// concrete kind (CpuBuffer, CudaBuffer) the way TensorPipe's does, so channel
// code dispatches on `device().type` and unwraps the kind it handles.
#include <memory>
#include <stdexcept>
#include <typeinfo>

#include <actorpipe/runtime/device.h>

// Same spelling as CUDA's <driver_types.h>, so both may be included in any order.
struct CUstream_st;
using cudaStream_t = CUstream_st*;

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

struct CpuBuffer {
  void* ptr{nullptr};
  Device getDevice() const { return Device{::actorpipe::kCpuDeviceType, 0}; }
};

struct CudaBuffer {
  void* ptr{nullptr};
  cudaStream_t stream{nullptr};
  // Which GPU holds `ptr`. -1 asks the CUDA runtime (when actorpipe is built
  // with CUDA); without CUDA support it reads as device 0.
  int deviceIndex{-1};
  Device getDevice() const;
};

class Buffer {
 public:
  Buffer() = default;
  template <typename TBuffer>
  /* implicit */ Buffer(TBuffer buffer)
      : impl_(std::make_shared<Model<TBuffer>>(std::move(buffer))) {}

  // The concrete buffer; throws std::runtime_error when it holds another
  // kind, as TensorPipe's does. A Buffer is a value, as in TensorPipe: a
  // copy changed through unwrap() leaves the original as it was.
  template <typename TBuffer>
  TBuffer& unwrap() {
    auto* model = dynamic_cast<Model<TBuffer>*>(impl_.get());
    if (model == nullptr) {
      throw std::runtime_error("Invalid unwrapping of tensorpipe::Buffer");
    }
    if (impl_.use_count() > 1) {  // shared with a copy: take our own first
      auto own = std::make_shared<Model<TBuffer>>(model->buffer);
      model = own.get();
      impl_ = std::move(own);
    }
    return model->buffer;
  }
  template <typename TBuffer>
  const TBuffer& unwrap() const {
    auto* model = dynamic_cast<const Model<TBuffer>*>(impl_.get());
    if (model == nullptr) {
      throw std::runtime_error("Invalid unwrapping of tensorpipe::Buffer");
    }
    return model->buffer;
  }

  // A buffer that was never given memory reports the CPU, like TensorPipe's.
  Device device() const {
    return impl_ ? impl_->device() : Device{::actorpipe::kCpuDeviceType, 0};
  }
  bool empty() const { return impl_ == nullptr; }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual Device device() const = 0;
  };
  template <typename TBuffer>
  struct Model final : Concept {
    explicit Model(TBuffer b) : buffer(std::move(b)) {}
    Device device() const override { return buffer.getDevice(); }
    TBuffer buffer;
  };
  // Shared until written through unwrap(): copying a Buffer must stay cheap,
  // since Messages travel by value through actor mailboxes.
  std::shared_ptr<Concept> impl_;
};

}  // namespace tensorpipe
