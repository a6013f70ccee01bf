#pragma once
// Internal CUDA helpers, for files built only with CUDA support
// (ACTORPIPE_HAS_CUDA): a failed runtime call as an Error, and what only the
// driver API tells (the allocation that holds a pointer). The driver API is
// reached through the runtime's entry-point lookup, so nothing links
// libcuda: a machine without a driver still loads the library.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::detail {

inline Error cudaFailure(const char* call, cudaError_t status) {
  return ACTORPIPE_ERROR(CudaError, call, cudaGetErrorString(status), static_cast<int>(status));
}
// `ACTORPIPE_CUDA_TRY(cudaCall(...))` returns the failure as an Error.
#define ACTORPIPE_CUDA_TRY(call)                                              \
  do {                                                                        \
    cudaError_t actorpipeCudaStatus = (call);                                 \
    if (actorpipeCudaStatus != cudaSuccess) {                                 \
      return ::actorpipe::detail::cudaFailure(#call, actorpipeCudaStatus);    \
    }                                                                         \
  } while (false)

// The allocation that holds `ptr` (device memory): its first byte, its
// size, and the driver's id for it (unique among this process's
// allocations while it lives; a new allocation at the same address has
// another).
struct AllocationRange {
  uintptr_t base{0};
  size_t size{0};
  uint64_t bufferId{0};
};
Error allocationOf(const void* ptr, AllocationRange& out);

// Set once the process is exiting (after main): the runtime may be torn
// down already, so destructors make no CUDA call then.
std::atomic<bool>& cudaExiting();

// The device that holds `ptr`, or an error for host or unknown memory.
Error deviceOfPointer(const void* ptr, int& device);

}  // namespace actorpipe::detail
