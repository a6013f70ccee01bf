#pragma once
// Tensors through pipes. A Tensor written as `pipeTensor(t)` arrives as a
// Tensor with the same dtype, shape and bytes: the bytes move on the channel
// the pipe negotiated, from the tensor's own memory straight into memory
// the reader allocates (no copy through a staging buffer where the channel
// allows: xth and cma copy once); dtype and shape travel in the entry's
// metadata, in a form only these functions write and read.
//
//   writer:  message.tensors.push_back(pipeTensor(t));  // t alive until the write's callback
//   reader:  pipe->readDescriptor([&](const Error& e, Descriptor d) {
//              Allocation a;
//              std::vector<Tensor> received(d.tensors.size());
//              for (size_t i = 0; i < d.tensors.size(); ++i) {
//                a.tensors.emplace_back();
//                if (Error bad = receiveTensor(d.tensors[i], received[i], a.tensors.back())) ...;
//              }
//              pipe->read(a, [&](const Error& e) { /* received[i] hold the data */ });
//            });
//
// The metadata comes from the peer: it is parsed strictly (a known dtype,
// at most kMaxTensorDims extents of decimal digits, their product times the
// element size exactly the length the descriptor announced, no overflow), so
// what the reader allocates is never more than that length, which the pipe
// already bounds (Limits::maxTensorSize). Anything else is a ProtocolError.
#include <cstddef>
#include <string>

#include <actorpipe/actors/tensor.h>
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/message.h>

namespace actorpipe {

constexpr size_t kMaxTensorDims = 16;

// The message entry for `tensor` (its bytes, not a copy), with dtype and
// shape in the metadata, then the caller's own `metadata`.
Message::Tensor pipeTensor(const Tensor& tensor, const std::string& metadata = std::string());

// Whether a received entry was written by pipeTensor (a plain TensorPipe
// entry is not: read it as bytes).
bool isPipeTensor(const Descriptor::Tensor& entry);

// The dtype and shape an entry announces, checked against its length; the
// writer's own metadata in `metadata` when asked. Allocates nothing.
Error parsePipeTensor(const Descriptor::Tensor& entry, DType& dtype, Shape& shape,
                      std::string* metadata = nullptr);

// Makes `out` a Tensor of the entry's dtype and shape and `allocation` the
// entry to read into it; `out` holds the data once the read completes. It
// lands on a device of the type it left from: the host, or the CUDA device
// the writer targeted (else the one of the writer's index), allocated here
// (a CudaError where there is no such device). If `out` is already a Tensor
// of that dtype, shape and device, its memory is used (read in place, for a
// caller that reuses buffers).
Error receiveTensor(const Descriptor::Tensor& entry, Tensor& out, Allocation::Tensor& allocation,
                    std::string* metadata = nullptr);

} // namespace actorpipe
