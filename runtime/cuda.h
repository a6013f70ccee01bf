#pragma once
// The few CUDA operations a user of actorpipe (and its tests and benchmarks)
// needs around CUDA tensors, without linking a CUDA runtime of their own:
// device memory, streams, copies. They work in every build: without CUDA
// support compiled in, or without a driver or a device, each says so through
// its Error (a CudaError) and `available()` is false.
//
// A process that will fork children which use CUDA must not call any of
// these first: CUDA does not survive fork (the child's calls fail with
// "initialization error"). `available()` initialises CUDA.
#include <cstddef>
#include <string>

#include <actorpipe/runtime/buffer.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::cuda {

// Whether this library was built with CUDA support.
bool compiled();
// The number of usable devices (0 where none: then `why` says why). The
// first call starts CUDA in this process.
int deviceCount(std::string* why = nullptr);
inline bool available() { return deviceCount() > 0; }
// Whether the NVIDIA driver shows a GPU here, asked without starting CUDA
// (no thread, no device file, no memory): what the CUDA channels' isViable()
// says, so that a process that never moves a CUDA tensor never starts CUDA.
// CUDA_VISIBLE_DEVICES set to "" or "-1" hides every GPU.
bool driverShowsDevice();
// Whether deviceCount() has run in this process (CUDA started by actorpipe).
bool started();

// Device memory of `bytes` on `device`, or nullptr with `error` set. These
// leave the calling thread's current device as it was.
void* allocate(size_t bytes, int device, Error& error);
// Pinned (page-locked) host memory.
void* allocateHost(size_t bytes, Error& error);
Error release(void* ptr);  // device memory from allocate()
Error releaseHost(void* ptr);

// A non-blocking stream on `device`.
cudaStream_t createStream(int device, Error& error);
Error destroyStream(cudaStream_t stream);
Error synchronize(cudaStream_t stream);

// Copies in any direction (host or device, either side), ordered on `stream`.
Error copyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);
Error memsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);
// Blocking copies between host memory and device memory (any direction):
// the bytes have landed when it returns, whatever memory they came from.
Error copy(void* dst, const void* src, size_t bytes);

// Which device holds `ptr`, or -1 (host memory, or no CUDA).
int deviceOf(const void* ptr);

}  // namespace actorpipe::cuda
