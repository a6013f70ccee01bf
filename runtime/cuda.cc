#include <actorpipe/runtime/cuda.h>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#ifdef ACTORPIPE_HAS_CUDA
#include <cuda.h>  // the driver API's types and names only; reached through cudaGetDriverEntryPoint

#include <mutex>

#include <actorpipe/runtime/detail/cuda.h>
#endif

namespace actorpipe::cuda {
namespace {
std::atomic<bool> startedFlag{false};
}  // namespace

bool started() { return startedFlag.load(std::memory_order_acquire); }

bool driverShowsDevice() {
  if (!compiled()) return false;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    if (visible[0] == '\0' || std::strcmp(visible, "-1") == 0) return false;
  }
  // The driver lists its GPUs here; a container may show only the device files.
  if (DIR* dir = ::opendir("/proc/driver/nvidia/gpus")) {
    bool any = false;
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') any = true;
    }
    ::closedir(dir);
    if (any) return true;
  }
  return ::access("/dev/nvidia0", F_OK) == 0 && ::access("/dev/nvidiactl", F_OK) == 0;
}

#ifdef ACTORPIPE_HAS_CUDA

using actorpipe::detail::cudaFailure;

bool compiled() { return true; }

int deviceCount(std::string* why) {
  static std::once_flag once;
  static int count = 0;
  static std::string reason;
  std::call_once(once, [] {
    startedFlag.store(true, std::memory_order_release);
    cudaError_t status = cudaGetDeviceCount(&count);
    // Registered after the runtime's first call, where it registers its own
    // teardown, so this runs first (atexit runs last-registered first): what
    // outlives main (an endpoint, a loop still polling) then leaves CUDA
    // alone. (It was registered before that call until 2026-11-27, so it ran
    // after the teardown. Fixing that did not end the benchmark's segfault
    // at exit with cuda_ipc: docs/cuda.md, "Known problems".)
    std::atexit([] { actorpipe::detail::cudaExiting().store(true); });
    if (status != cudaSuccess) {
      count = 0;
      reason = std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(status);
      (void)cudaGetLastError();  // not sticky: clear it for later calls
    } else if (count == 0) {
      reason = "no CUDA device: the driver reports none";
    }
  });
  if (why != nullptr) *why = reason;
  return count;
}

namespace {
Error noDevice() {
  std::string why;
  if (deviceCount(&why) > 0) return Error();
  return ACTORPIPE_ERROR(CudaError, "CUDA", why);
}
}  // namespace

// Runs `call` with `device` current on this thread, then makes the one that
// was current again: a caller's thread (a CAF worker receiving a tensor the
// peer named for another GPU) keeps the device it had.
template <class Call>
cudaError_t onDevice(int device, Call&& call) {
  int before = 0;
  cudaError_t status = cudaGetDevice(&before);
  if (status != cudaSuccess) return status;
  if (before != device && (status = cudaSetDevice(device)) != cudaSuccess) return status;
  status = call();
  if (before != device) {
    cudaError_t restored = cudaSetDevice(before);
    if (status == cudaSuccess) status = restored;
  }
  return status;
}

void* allocate(size_t bytes, int device, Error& error) {
  if ((error = noDevice())) return nullptr;
  void* ptr = nullptr;
  cudaError_t status = onDevice(device, [&] { return cudaMalloc(&ptr, bytes == 0 ? 1 : bytes); });
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    error = cudaFailure("cudaMalloc", status);
    return nullptr;
  }
  return ptr;
}

void* allocateHost(size_t bytes, Error& error) {
  if ((error = noDevice())) return nullptr;
  void* ptr = nullptr;
  cudaError_t status = cudaMallocHost(&ptr, bytes == 0 ? 1 : bytes);
  if (status != cudaSuccess) {
    error = cudaFailure("cudaMallocHost", status);
    return nullptr;
  }
  return ptr;
}

Error release(void* ptr) {
  if (ptr == nullptr) return Error();
  int device = 0;
  if (auto e = detail::deviceOfPointer(ptr, device)) return e;
  ACTORPIPE_CUDA_TRY(onDevice(device, [&] { return cudaFree(ptr); }));
  return Error();
}

Error releaseHost(void* ptr) {
  if (ptr == nullptr) return Error();
  ACTORPIPE_CUDA_TRY(cudaFreeHost(ptr));
  return Error();
}

cudaStream_t createStream(int device, Error& error) {
  if ((error = noDevice())) return nullptr;
  cudaStream_t stream = nullptr;
  cudaError_t status = onDevice(device, [&] { return cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); });
  if (status != cudaSuccess) {
    error = cudaFailure("cudaStreamCreateWithFlags", status);
    return nullptr;
  }
  return stream;
}

Error destroyStream(cudaStream_t stream) {
  if (stream == nullptr) return Error();
  ACTORPIPE_CUDA_TRY(cudaStreamDestroy(stream));
  return Error();
}

Error synchronize(cudaStream_t stream) {
  if (auto e = noDevice()) return e;
  ACTORPIPE_CUDA_TRY(cudaStreamSynchronize(stream));
  return Error();
}

Error copyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return Error();
  if (auto e = noDevice()) return e;
  ACTORPIPE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  return Error();
}

Error memsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return Error();
  if (auto e = noDevice()) return e;
  ACTORPIPE_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, stream));
  return Error();
}

Error copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Error();
  if (auto e = noDevice()) return e;
  ACTORPIPE_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // From pageable host memory cudaMemcpy returns once the bytes are staged
  // for the DMA, not once they landed (CUDA's "API synchronization
  // behavior"); the DMA is ordered on the legacy default stream, which
  // non-blocking streams (ours, the channels' copies) do not wait for. So a
  // copy that must be finished when it returns waits for that stream.
  ACTORPIPE_CUDA_TRY(cudaStreamSynchronize(nullptr));
  return Error();
}

int deviceOf(const void* ptr) {
  int device = -1;
  if (deviceCount() == 0 || detail::deviceOfPointer(ptr, device)) return -1;
  return device;
}

#else  // no CUDA support compiled in: every call says so

namespace {
Error notCompiled() {
  return ACTORPIPE_ERROR(CudaError, "CUDA", "no CUDA support: actorpipe was built without a CUDA toolkit");
}
}  // namespace

bool compiled() { return false; }
int deviceCount(std::string* why) {
  if (why != nullptr) *why = "no CUDA device: actorpipe was built without CUDA support";
  return 0;
}
void* allocate(size_t, int, Error& error) { error = notCompiled(); return nullptr; }
void* allocateHost(size_t, Error& error) { error = notCompiled(); return nullptr; }
Error release(void* ptr) { return ptr == nullptr ? Error() : notCompiled(); }
Error releaseHost(void* ptr) { return ptr == nullptr ? Error() : notCompiled(); }
cudaStream_t createStream(int, Error& error) { error = notCompiled(); return nullptr; }
Error destroyStream(cudaStream_t stream) { return stream == nullptr ? Error() : notCompiled(); }
Error synchronize(cudaStream_t) { return notCompiled(); }
Error copyAsync(void*, const void*, size_t bytes, cudaStream_t) { return bytes == 0 ? Error() : notCompiled(); }
Error memsetAsync(void*, int, size_t bytes, cudaStream_t) { return bytes == 0 ? Error() : notCompiled(); }
Error copy(void*, const void*, size_t bytes) { return bytes == 0 ? Error() : notCompiled(); }
int deviceOf(const void*) { return -1; }

#endif

}  // namespace actorpipe::cuda

#ifdef ACTORPIPE_HAS_CUDA
namespace actorpipe::detail {

std::atomic<bool>& cudaExiting() {
  static std::atomic<bool> exiting{false};
  return exiting;
}

Error deviceOfPointer(const void* ptr, int& device) {
  cudaPointerAttributes attributes{};
  cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaFailure("cudaPointerGetAttributes", status);
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return ACTORPIPE_ERROR(CudaError, "cudaPointerGetAttributes", "the pointer is not device memory");
  }
  device = attributes.device;
  return Error();
}

namespace {
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using GetAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

template <typename Fn>
Fn driverEntry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}
}  // namespace

Error allocationOf(const void* ptr, AllocationRange& out) {
  static const auto getRange = driverEntry<GetAddressRange>("cuMemGetAddressRange");
  static const auto getAttribute = driverEntry<GetAttribute>("cuPointerGetAttribute");
  if (getRange == nullptr || getAttribute == nullptr) {
    return ACTORPIPE_ERROR(CudaError, "cudaGetDriverEntryPoint", "the driver lacks cuMemGetAddressRange");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto at = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  if (CUresult r = getRange(&base, &size, at); r != CUDA_SUCCESS) {
    return ACTORPIPE_ERROR(CudaError, "cuMemGetAddressRange", "the pointer is in no device allocation",
                           static_cast<int>(r));
  }
  unsigned long long id = 0;
  if (CUresult r = getAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, at); r != CUDA_SUCCESS) {
    return ACTORPIPE_ERROR(CudaError, "cuPointerGetAttribute", "no buffer id", static_cast<int>(r));
  }
  out.base = static_cast<uintptr_t>(base);
  out.size = size;
  out.bufferId = id;
  return Error();
}

}  // namespace actorpipe::detail
#endif
