// A group's link frames (actors/group/frames.h), as another rank, or a
// stranger that reached a rank's listener, may send them. Whatever decodes
// must encode back to bytes that decode the same.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <actorpipe/actors/group/frames.h>

using namespace actorpipe::group;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  LinkFrame frame;
  if (decode(bytes, frame)) return 0;
  if (frame.reason.size() > kMaxLinkFrameReason || frame.rank < -1) std::abort();
  LinkFrame again;
  if (decode(encode(frame), again) || encode(again) != encode(frame) || again.describe() != frame.describe()) {
    std::abort();
  }
  return 0;
}
