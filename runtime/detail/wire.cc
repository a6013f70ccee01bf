#include <actorpipe/runtime/detail/wire.h>

#include <cstring>

#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/codec.h>

namespace actorpipe::wire {
namespace {

constexpr uint8_t kMagic0 = 'A';
constexpr uint8_t kMagic1 = 'P';

void writeOffers(Writer& w, const std::vector<Offer>& offers, bool withDevices) {
  w.u32(static_cast<uint32_t>(offers.size()));
  for (const auto& o : offers) {
    w.str(o.name);
    w.i64(o.priority);
    w.str(o.domainDescriptor);
    if (withDevices) {
      w.u32(static_cast<uint32_t>(o.deviceTypes.size()));
      for (const auto& d : o.deviceTypes) w.str(d);
      w.str(o.detail);
    }
  }
}

void readOffers(Reader& r, const Limits& limits, std::vector<Offer>& offers, bool withDevices) {
  uint32_t n = r.count(16, 1024, "offer");
  offers.resize(n);
  for (auto& o : offers) {
    o.name = r.str("offer name");
    o.priority = r.i64();
    o.domainDescriptor = r.str("domain descriptor");
    if (withDevices) {
      uint32_t m = r.count(4, 64, "device type");
      o.deviceTypes.resize(m);
      for (auto& d : o.deviceTypes) d = r.str("device type");
      o.detail = r.str("channel detail");
    }
  }
}

}  // namespace

namespace {

void putHeader(char* h, FrameType type, size_t bodyLength) {
  h[0] = static_cast<char>(kMagic0);
  h[1] = static_cast<char>(kMagic1);
  h[2] = static_cast<char>(kVersion);
  h[3] = static_cast<char>(type);
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<char>(uint32_t(bodyLength) >> (8 * i));
}

}  // namespace

std::string encodeHeader(FrameType type, size_t bodyLength) {
  std::string h(kHeaderSize, '\0');
  putHeader(&h[0], type, bodyLength);
  return h;
}

Error decodeHeader(const uint8_t* b, const Limits& limits, FrameHeader& out) {
  if (b[0] != kMagic0 || b[1] != kMagic1) {
    return ACTORPIPE_ERROR(ProtocolError, "bad magic: not an actorpipe peer");
  }
  if (b[2] != kVersion) {
    return ACTORPIPE_ERROR(ProtocolError, "unsupported wire version " + std::to_string(b[2]) +
                                              " (we speak " + std::to_string(kVersion) + ")");
  }
  if (b[3] < uint8_t(FrameType::kHello) || b[3] > uint8_t(FrameType::kAuth)) {
    return ACTORPIPE_ERROR(ProtocolError, "unknown frame type " + std::to_string(b[3]));
  }
  uint32_t length = 0;
  for (int i = 0; i < 4; ++i) length |= uint32_t(b[4 + i]) << (8 * i);
  if (length > limits.maxFrameSize) {
    return ACTORPIPE_ERROR(LimitExceededError, "frame", length, limits.maxFrameSize);
  }
  out.type = static_cast<FrameType>(b[3]);
  out.length = length;
  return Error();
}

std::string encode(const Hello& hello) {
  Writer w;
  w.str(hello.contextName);
  writeOffers(w, hello.transports, false);
  writeOffers(w, hello.channels, true);
  return w.take();
}

std::string encode(const Welcome& welcome) {
  Writer w;
  w.str(welcome.contextName);
  w.str(welcome.transport);
  w.u32(static_cast<uint32_t>(welcome.channels.size()));
  for (const auto& c : welcome.channels) {
    w.str(c.first);
    w.str(c.second);
  }
  w.u32(static_cast<uint32_t>(welcome.setups.size()));
  for (const auto& c : welcome.setups) {
    w.str(c.first);
    w.str(c.second);
  }
  w.str(welcome.address);
  w.u64(welcome.joinToken);
  w.u32(static_cast<uint32_t>(welcome.notes.size()));
  for (const auto& n : welcome.notes) w.str(n);
  return w.take();
}

std::string encode(const Reject& reject) {
  Writer w;
  w.str(reject.reason);
  w.u8(reject.kind);
  return w.take();
}

namespace {

template <class W>
void writeMessage(W& w, const MessageFrame& frame) {
  const Descriptor& d = frame.descriptor;
  w.str(d.metadata);
  w.u32(static_cast<uint32_t>(d.payloads.size()));
  for (const auto& p : d.payloads) {
    w.u64(p.length);
    w.str(p.metadata);
  }
  w.u32(static_cast<uint32_t>(d.tensors.size()));
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    const auto& t = d.tensors[i];
    w.u64(t.length);
    w.device(t.sourceDevice);
    w.u8(t.targetDevice ? 1 : 0);
    if (t.targetDevice) w.device(*t.targetDevice);
    w.str(t.metadata);
    const auto& route = frame.routes[i];
    w.str(route.channel);
    w.u8(route.inlineData ? 1 : 0);
    w.str(route.channelDescriptor);
  }
}

}  // namespace

std::string encode(const MessageFrame& frame) {
  Writer w;
  writeMessage(w, frame);
  return w.take();
}

std::string encodeMessage(const MessageFrame& frame) {
  std::string out;
  out.reserve(128);
  encodeMessage(frame, out);
  return out;
}

void encodeMessage(const MessageFrame& frame, std::string& out) {
  SizeCounter count;
  writeMessage(count, frame);
  out.resize(kHeaderSize + count.size());
  SpanWriter w(&out[kHeaderSize]);
  writeMessage(w, frame);
  ACTORPIPE_DCHECK(w.end() == out.data() + out.size());
  putHeader(&out[0], FrameType::kMessage, count.size());
}

Error decode(const uint8_t* body, size_t length, const Limits& limits, Hello& out) {
  Reader r(body, length);
  out.contextName = r.str("context name");
  readOffers(r, limits, out.transports, false);
  readOffers(r, limits, out.channels, true);
  return r.finish("hello");
}

Error decode(const uint8_t* body, size_t length, const Limits& limits, Welcome& out) {
  Reader r(body, length);
  out.contextName = r.str("context name");
  out.transport = r.str("transport");
  uint32_t n = r.count(8, 64, "channel choice");
  out.channels.resize(n);
  for (auto& c : out.channels) {
    c.first = r.str("device type");
    c.second = r.str("channel");
  }
  uint32_t m = r.count(8, 64, "channel setup");
  out.setups.resize(m);
  for (auto& c : out.setups) {
    c.first = r.str("channel");
    c.second = r.str("channel setup");
  }
  out.address = r.str("address");
  out.joinToken = r.u64();
  uint32_t notes = r.count(4, 256, "note");
  out.notes.resize(notes);
  for (auto& n : out.notes) n = r.str("note");
  return r.finish("welcome");
}

Error decode(const uint8_t* body, size_t length, const Limits& limits, Reject& out) {
  Reader r(body, length);
  out.reason = r.str("reason");
  out.kind = r.u8() == wire::Reject::kAuthentication ? wire::Reject::kAuthentication : wire::Reject::kNegotiation;
  return r.finish("reject");
}

std::string encode(const Join& join) {
  Writer w;
  w.u64(join.token);
  return w.take();
}

Error decode(const uint8_t* body, size_t length, const Limits& limits, Join& out) {
  Reader r(body, length);
  out.token = r.u64();
  return r.finish("join");
}

std::string encode(const Challenge& challenge) {
  Writer w;
  w.str(challenge.nonce);
  w.str(challenge.mac);
  return w.take();
}

std::string encode(const Auth& auth) {
  Writer w;
  w.str(auth.mac);
  return w.take();
}

Error decode(const uint8_t* body, size_t length, const Limits& limits, Challenge& out) {
  Reader r(body, length);
  out.nonce = r.str("nonce");
  out.mac = r.str("mac");
  return r.finish("challenge");
}

Error decode(const uint8_t* body, size_t length, const Limits& limits, Auth& out) {
  Reader r(body, length);
  out.mac = r.str("mac");
  return r.finish("auth");
}

// Every field of `out` is written (a pipe decodes each message into the
// frame of the one before, reusing its strings' memory).
Error decode(const uint8_t* body, size_t length, const Limits& limits, MessageFrame& out) {
  Reader r(body, length);
  Descriptor& d = out.descriptor;
  r.str(d.metadata, "metadata");
  uint32_t np = r.count(12, limits.maxEntries, "payload");
  d.payloads.resize(np);
  size_t total = 0;
  bool overflow = false;
  auto account = [&](uint64_t n) {
    if (total + n < total) overflow = true;
    total += n;
  };
  for (auto& p : d.payloads) {
    p.length = r.u64();
    r.str(p.metadata, "payload metadata");
    if (!r.failed() && p.length > limits.maxPayloadSize) {
      return ACTORPIPE_ERROR(LimitExceededError, "payload", p.length, limits.maxPayloadSize);
    }
    account(p.length);
  }
  uint32_t nt = r.count(30, limits.maxEntries - np, "tensor");
  d.tensors.resize(nt);
  out.routes.resize(nt);
  for (size_t i = 0; i < nt; ++i) {
    auto& t = d.tensors[i];
    t.length = r.u64();
    r.device(t.sourceDevice);
    if (r.u8() != 0) {
      t.targetDevice = r.device();
    } else {
      t.targetDevice.reset();
    }
    r.str(t.metadata, "tensor metadata");
    r.str(out.routes[i].channel, "channel name");
    out.routes[i].inlineData = r.u8() != 0;
    r.str(out.routes[i].channelDescriptor, "channel descriptor");
    if (!r.failed() && t.length > limits.maxTensorSize) {
      return ACTORPIPE_ERROR(LimitExceededError, "tensor", t.length, limits.maxTensorSize);
    }
    account(t.length);
  }
  if (!r.failed() && (overflow || total > limits.maxMessageSize)) {
    return ACTORPIPE_ERROR(LimitExceededError, "message", total, limits.maxMessageSize);
  }
  return r.finish("message");
}

} // namespace actorpipe::wire
