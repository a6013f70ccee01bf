// libFuzzer targets for the wire format: everything a peer sends goes
// through these decoders. Built once per target with -DFUZZ_TARGET=...:
//   frames   a byte stream cut into frames: decodeHeader, then the body's decoder
//   hello, welcome, reject, join, message, challenge, auth   one frame body each
// Each body is decoded under the default Limits and under tight ones; a body
// that decodes must re-encode to bytes that decode to the same thing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include <actorpipe/runtime/detail/wire.h>

using namespace actorpipe;

namespace {

#define FUZZ_ASSERT(cond)   \
  do {                      \
    if (!(cond)) __builtin_trap(); \
  } while (0)

Limits tightLimits() {
  Limits l;
  l.maxFrameSize = 4096;
  l.maxPayloadSize = 1024;
  l.maxTensorSize = 4096;
  l.maxMessageSize = 8192;
  l.maxEntries = 8;
  return l;
}

bool same(const wire::Offer& a, const wire::Offer& b) {
  return a.name == b.name && a.priority == b.priority && a.domainDescriptor == b.domainDescriptor &&
         a.deviceTypes == b.deviceTypes && a.detail == b.detail;
}

bool same(const std::vector<wire::Offer>& a, const std::vector<wire::Offer>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) return false;
  }
  return true;
}

bool same(const wire::Hello& a, const wire::Hello& b) {
  return a.contextName == b.contextName && same(a.transports, b.transports) && same(a.channels, b.channels);
}
bool same(const wire::Welcome& a, const wire::Welcome& b) {
  return a.contextName == b.contextName && a.transport == b.transport && a.channels == b.channels &&
         a.setups == b.setups && a.address == b.address && a.joinToken == b.joinToken && a.notes == b.notes;
}
bool same(const wire::Reject& a, const wire::Reject& b) { return a.reason == b.reason && a.kind == b.kind; }
bool same(const wire::Challenge& a, const wire::Challenge& b) { return a.nonce == b.nonce && a.mac == b.mac; }
bool same(const wire::Auth& a, const wire::Auth& b) { return a.mac == b.mac; }
bool same(const wire::Join& a, const wire::Join& b) { return a.token == b.token; }
bool same(const wire::MessageFrame& a, const wire::MessageFrame& b) {
  const Descriptor& x = a.descriptor;
  const Descriptor& y = b.descriptor;
  if (x.metadata != y.metadata || x.payloads.size() != y.payloads.size() ||
      x.tensors.size() != y.tensors.size() || a.routes.size() != b.routes.size()) {
    return false;
  }
  for (size_t i = 0; i < x.payloads.size(); ++i) {
    if (x.payloads[i].length != y.payloads[i].length || x.payloads[i].metadata != y.payloads[i].metadata) return false;
  }
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    const auto& s = x.tensors[i];
    const auto& t = y.tensors[i];
    if (s.length != t.length || s.sourceDevice != t.sourceDevice || s.metadata != t.metadata ||
        bool(s.targetDevice) != bool(t.targetDevice) || (s.targetDevice && *s.targetDevice != *t.targetDevice)) {
      return false;
    }
    if (a.routes[i].channel != b.routes[i].channel || a.routes[i].inlineData != b.routes[i].inlineData ||
        a.routes[i].channelDescriptor != b.routes[i].channelDescriptor) {
      return false;
    }
  }
  return true;
}

// Decodes under `limits`; on success, checks the encode/decode round trip.
// A message frame is also decoded over what the last input left in one (a
// pipe decodes each message over the one before): the same outcome as into
// a fresh frame.
template <typename Frame>
void decodeBody(const uint8_t* data, size_t size, const Limits& limits) {
  Frame frame;
  Error error = wire::decode(data, size, limits, frame);
  if constexpr (std::is_same_v<Frame, wire::MessageFrame>) {
    static Frame reused;
    Error reusedError = wire::decode(data, size, limits, reused);
    FUZZ_ASSERT(bool(error) == bool(reusedError));
    if (!error) FUZZ_ASSERT(same(frame, reused));
  }
  if (error) {
    FUZZ_ASSERT(!error.what().empty());
    return;
  }
  std::string again = wire::encode(frame);
  Frame second;
  FUZZ_ASSERT(!wire::decode(reinterpret_cast<const uint8_t*>(again.data()), again.size(), limits, second));
  FUZZ_ASSERT(same(frame, second));
  FUZZ_ASSERT(wire::encode(second) == again);
}

template <typename Frame>
void fuzzBody(const uint8_t* data, size_t size) {
  decodeBody<Frame>(data, size, Limits());
  decodeBody<Frame>(data, size, tightLimits());
}

void decodeByType(wire::FrameType type, const uint8_t* body, size_t length, const Limits& limits) {
  switch (type) {
    case wire::FrameType::kHello: decodeBody<wire::Hello>(body, length, limits); break;
    case wire::FrameType::kWelcome: decodeBody<wire::Welcome>(body, length, limits); break;
    case wire::FrameType::kReject: decodeBody<wire::Reject>(body, length, limits); break;
    case wire::FrameType::kMessage: decodeBody<wire::MessageFrame>(body, length, limits); break;
    case wire::FrameType::kJoin: decodeBody<wire::Join>(body, length, limits); break;
    case wire::FrameType::kChallenge: decodeBody<wire::Challenge>(body, length, limits); break;
    case wire::FrameType::kAuth: decodeBody<wire::Auth>(body, length, limits); break;
    default: __builtin_trap();  // decodeHeader let an unknown type through
  }
}

// As a connection reads: header, then exactly `length` body bytes, repeatedly.
void fuzzFrames(const uint8_t* data, size_t size, const Limits& limits) {
  size_t offset = 0;
  while (size - offset >= wire::kHeaderSize) {
    wire::FrameHeader header{};
    Error error = wire::decodeHeader(data + offset, limits, header);
    if (error) return;
    FUZZ_ASSERT(header.length <= limits.maxFrameSize);
    offset += wire::kHeaderSize;
    if (size - offset < header.length) return;
    decodeByType(header.type, data + offset, header.length, limits);
    offset += header.length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if defined(FUZZ_FRAMES)
  fuzzFrames(data, size, Limits());
  fuzzFrames(data, size, tightLimits());
#elif defined(FUZZ_HELLO)
  fuzzBody<wire::Hello>(data, size);
#elif defined(FUZZ_WELCOME)
  fuzzBody<wire::Welcome>(data, size);
#elif defined(FUZZ_REJECT)
  fuzzBody<wire::Reject>(data, size);
#elif defined(FUZZ_JOIN)
  fuzzBody<wire::Join>(data, size);
#elif defined(FUZZ_MESSAGE)
  fuzzBody<wire::MessageFrame>(data, size);
#elif defined(FUZZ_CHALLENGE)
  fuzzBody<wire::Challenge>(data, size);
#elif defined(FUZZ_AUTH)
  fuzzBody<wire::Auth>(data, size);
#else
#error "define one FUZZ_<TARGET>"
#endif
  return 0;
}
