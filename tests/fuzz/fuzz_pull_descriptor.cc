// The pull channels' descriptor parser (channels/detail/pull_descriptor.h),
// fed what a hostile peer may put in a message frame. Whatever parses must
// print back to text that parses to the same fields.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <actorpipe/channels/detail/pull_descriptor.h>

using namespace actorpipe::channel::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (PullFormat format : {PullFormat::kInProcess, PullFormat::kCrossProcess}) {
    PullDescriptor d;
    if (parsePullDescriptor(text, format, "fuzz", d)) continue;
    PullDescriptor again;
    if (parsePullDescriptor(formatPullDescriptor(d, format), format, "fuzz", again) ||
        again.seq != d.seq || again.length != d.length || again.address != d.address || again.ack != d.ack) {
      std::abort();
    }
  }
  return 0;
}
