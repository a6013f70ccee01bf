#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <actorpipe/runtime/buffer.h>
#include <actorpipe/runtime/optional.h>

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

// What a writer hands to Pipe::write. The memory behind every pointer must
// stay valid and unchanged until the write's callback fires.
class Message final {
 public:
  std::string metadata;

  struct Payload {
    void* data{nullptr};
    size_t length{0};
    std::string metadata;
  };
  std::vector<Payload> payloads;

  struct Tensor {
    Buffer buffer;
    size_t length{0};
    // Where the reader should receive it; unset lets the reader decide.
    ::actorpipe::optional<Device> targetDevice;
    std::string metadata;
  };
  std::vector<Tensor> tensors;
};

// What a reader learns from Pipe::readDescriptor: every size, no data.
class Descriptor final {
 public:
  std::string metadata;

  struct Payload {
    size_t length{0};
    std::string metadata;
  };
  std::vector<Payload> payloads;

  struct Tensor {
    size_t length{0};
    Device sourceDevice;
    ::actorpipe::optional<Device> targetDevice;
    std::string metadata;
  };
  std::vector<Tensor> tensors;
};

// Where a reader wants the data of the last descriptor: one entry per payload
// and per tensor, each large enough for the length the descriptor gave.
class Allocation final {
 public:
  struct Payload {
    void* data{nullptr};
  };
  std::vector<Payload> payloads;

  struct Tensor {
    Buffer buffer;
  };
  std::vector<Tensor> tensors;
};

}  // namespace tensorpipe
