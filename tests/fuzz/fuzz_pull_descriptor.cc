// The pull channels' descriptor parser (channels/detail/pull_descriptor.h),
// and with FUZZ_CUDA_IPC_DESCRIPTOR cuda_ipc's (cuda_descriptor.h), fed what
// a hostile peer may put in a message frame. Whatever parses must print back
// to text that parses to the same fields.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <actorpipe/channels/detail/cuda_descriptor.h>
#include <actorpipe/channels/detail/pull_descriptor.h>

using namespace actorpipe::channel::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
#ifdef FUZZ_CUDA_IPC_DESCRIPTOR
  CudaIpcDescriptor d;
  if (parseCudaIpcDescriptor(text, d)) return 0;
  if (d.slot > kNoEvent || d.offset + d.length < d.offset) std::abort();  // what the parser promises
  CudaIpcDescriptor again;
  if (parseCudaIpcDescriptor(formatCudaIpcDescriptor(d), again) || again.seq != d.seq || again.length != d.length ||
      again.offset != d.offset || again.bufferId != d.bufferId || again.ackFd != d.ackFd || again.slot != d.slot ||
      again.memory != d.memory || again.event != d.event) {
    std::abort();
  }
  return 0;
#endif
  for (PullFormat format : {PullFormat::kInProcess, PullFormat::kCrossProcess}) {
    PullDescriptor d;
    if (parsePullDescriptor(text, format, "fuzz", d)) continue;
    PullDescriptor again;
    if (parsePullDescriptor(formatPullDescriptor(d, format), format, "fuzz", again) ||
        again.seq != d.seq || again.length != d.length || again.address != d.address || again.ack != d.ack || again.assist != d.assist) {
      std::abort();
    }
  }
  return 0;
}
