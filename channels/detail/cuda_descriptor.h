#pragma once
// What cuda_ipc's sender puts in the message frame for each tensor, and the
// strict parser its receiver runs on it (every field is the peer's). No
// CUDA here: the fuzz target cuda_ipc_descriptor links this file alone.
//
//   "seq:length:offset:buffer:ackfd:slot:" then 128 hex digits (the memory
//   handle) and 128 more (the event handle)
//
// The memory handle names the *allocation* that holds the tensor (CUDA IPC
// maps an allocation from its start), `offset` where the tensor starts in
// it, `buffer` the driver's id of that allocation (a new allocation at the
// same address has another: the receiver drops a stale mapping). `slot` is
// the sender's IPC event that is recorded once the tensor is ready on the
// sender's stream, or kNoEvent (the sender synchronised instead). `ackfd`
// names the sender's acknowledgement page among *its* file descriptors: the
// receiver opens it only in the process the kernel says is its peer.
#include <array>
#include <cstdint>
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::channel::detail {

constexpr uint64_t kEventSlots = 64;
constexpr uint64_t kNoEvent = kEventSlots;
constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t), sizeof(cudaIpcEventHandle_t)

struct CudaIpcDescriptor {
  uint64_t seq{0};
  uint64_t length{0};
  uint64_t offset{0};
  uint64_t bufferId{0};
  uint64_t ackFd{0};
  uint64_t slot{kNoEvent};
  std::array<uint8_t, kIpcHandleBytes> memory{};
  std::array<uint8_t, kIpcHandleBytes> event{};
};

std::string formatCudaIpcDescriptor(const CudaIpcDescriptor& d);
// Exactly those fields, in range (slot <= kNoEvent, ackfd < 2^31,
// offset + length without overflow); anything else is a ProtocolError.
Error parseCudaIpcDescriptor(const std::string& text, CudaIpcDescriptor& out);

} // namespace actorpipe::channel::detail
