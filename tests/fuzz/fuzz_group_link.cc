// A group's frames (actors/group/frames.h): link frames, as another rank or
// a stranger that reached a rank's listener may send them, and rendezvous
// frames, as anyone who reaches rank 0's rendezvous address may. Whatever
// decodes must encode back to bytes that decode the same.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <actorpipe/actors/group/frames.h>

using namespace actorpipe::group;

namespace {

void rendezvousFrame(const std::string& bytes) {
  RendezvousFrame frame;
  if (decode(bytes, frame)) return;
  if (frame.kind == RendezvousFrame::Kind::kHello &&
      (frame.rank < 0 || frame.rank >= frame.worldSize || frame.worldSize > kMaxWorldSize)) {
    std::abort();
  }
  if (frame.member.host.size() > kMaxHostBytes || frame.member.url.size() > kMaxUrlBytes) std::abort();
  if (frame.table.size() > static_cast<size_t>(kMaxWorldSize)) std::abort();
  RendezvousFrame again;
  if (decode(encode(frame), again) || encode(again) != encode(frame)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  rendezvousFrame(bytes);
  LinkFrame frame;
  if (decode(bytes, frame)) return 0;
  if (frame.reason.size() > kMaxLinkFrameReason || frame.rank < -1) std::abort();
  LinkFrame again;
  if (decode(encode(frame), again) || encode(again) != encode(frame) || again.describe() != frame.describe()) {
    std::abort();
  }
  return 0;
}
