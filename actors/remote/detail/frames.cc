#include <actorpipe/actors/remote/detail/frames.h>

#include <caf/message_id.hpp>

#include <actorpipe/runtime/detail/codec.h>

namespace actorpipe::remote::detail {

bool isPlainName(const std::string& text, size_t limit) {
  if (text.empty() || text.size() > limit) return false;
  for (char c : text) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

namespace {

void writeUrls(wire::Writer& w, const std::vector<std::string>& urls) {
  w.u32(static_cast<uint32_t>(urls.size()));
  for (const auto& url : urls) w.str(url);
}

} // namespace

std::string encodeFrame(const Frame& f) {
  size_t urls = 0;
  for (const auto& url : f.urls) urls += 4 + url.size();
  wire::Writer w(0, 40 + f.identity.size() + f.node.size() + f.name.size() + f.reason.size() +
                      f.body.size() + urls);
  w.u8(kFrameVersion);
  w.u8(static_cast<uint8_t>(f.kind));
  switch (f.kind) {
    case Frame::Kind::kHello:
      w.str(f.identity);
      w.u32(f.pid);
      w.u64(f.messages);
      w.u64(f.bytes);
      w.str(f.node);
      writeUrls(w, f.urls);
      break;
    case Frame::Kind::kWhere:
      w.u64(f.request);
      w.str(f.node);
      break;
    case Frame::Kind::kAt:
      w.u64(f.request);
      writeUrls(w, f.urls);
      break;
    case Frame::Kind::kLookup:
      w.u64(f.request);
      w.str(f.name);
      break;
    case Frame::Kind::kFound:
      w.u64(f.request);
      w.u64(f.aid);
      w.u32(static_cast<uint32_t>(f.interface.size()));
      for (const auto& entry : f.interface) w.str(entry);
      break;
    case Frame::Kind::kMessage:
      w.u64(f.source);
      w.u64(f.aid);
      w.u64(f.messageId);
      break;
    case Frame::Kind::kInline:
      return encodeInlineFrame(f, f.body.data(), f.body.size());
    case Frame::Kind::kDown:
      w.u64(f.aid);
      w.u8(f.code);
      w.u64(f.category);
      w.str(f.reason);
      break;
    case Frame::Kind::kCredit:
      w.u64(f.messages);
      w.u64(f.bytes);
      break;
    case Frame::Kind::kLink:
    case Frame::Kind::kUnlink:
      w.u64(f.source);
      w.u64(f.aid);
      break;
    case Frame::Kind::kWatch:
      w.u64(f.aid);
      break;
    case Frame::Kind::kBeat:
    case Frame::Kind::kBye:
      break;
  }
  return w.take();
}

std::string encodeInlineFrame(const Frame& f, const char* bytes, size_t size) {
  wire::Writer w(0, 32 + size);
  w.u8(kFrameVersion);
  w.u8(static_cast<uint8_t>(Frame::Kind::kInline));
  w.u64(f.source);
  w.u64(f.aid);
  w.u64(f.messageId);
  w.u32(static_cast<uint32_t>(size));
  w.bytes().append(bytes, size);
  return w.take();
}

Error decodeFrame(const std::string& bytes, Frame& f) {
  return decodeFrame(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), f);
}

namespace {

// Listen URLs a peer names (its own in HELLO, a third node's in AT): a few
// printable ones; whether they parse is for the connect to say.
void readUrls(wire::Reader& r, std::vector<std::string>& urls) {
  uint32_t n = r.count(4, kMaxUrls, "urls");
  for (uint32_t i = 0; i < n && !r.failed(); ++i) {
    urls.push_back(r.str("url"));
    if (!r.failed() && !isPlainName(urls.back(), kMaxUrlLength)) r.fail("bad url");
  }
}

bool badNodeId(const std::string& node) { return node.empty() || node.size() > kMaxNodeIdLength; }

} // namespace

Error decodeFrame(const uint8_t* bytes, size_t size, Frame& f) {
  wire::Reader r(bytes, size);
  uint8_t version = r.u8();
  uint8_t kind = r.u8();
  if (r.failed()) return r.finish("node");
  if (version != kFrameVersion) {
    return ACTORPIPE_ERROR(ProtocolError, "node frame version " + std::to_string(version) +
                                              " (this node speaks " +
                                              std::to_string(kFrameVersion) + ")");
  }
  f = Frame();
  switch (kind) {
    case uint8_t(Frame::Kind::kHello):
      f.kind = Frame::Kind::kHello;
      f.identity = r.str("identity");
      f.pid = r.u32();
      f.messages = r.u64();
      f.bytes = r.u64();
      f.node = r.str("node id");
      if (!r.failed() && !isPlainName(f.identity, kMaxIdentityLength)) r.fail("bad node identity");
      if (!r.failed() && badNodeId(f.node)) r.fail("bad node id");
      readUrls(r, f.urls);
      break;
    case uint8_t(Frame::Kind::kWhere):
      f.kind = Frame::Kind::kWhere;
      f.request = r.u64();
      f.node = r.str("node id");
      if (!r.failed() && badNodeId(f.node)) r.fail("bad node id");
      break;
    case uint8_t(Frame::Kind::kAt):
      f.kind = Frame::Kind::kAt;
      f.request = r.u64();
      readUrls(r, f.urls);
      break;
    case uint8_t(Frame::Kind::kLookup):
      f.kind = Frame::Kind::kLookup;
      f.request = r.u64();
      f.name = r.str("name");
      if (!r.failed() && !isPlainName(f.name, kMaxNameLength)) r.fail("bad actor name");
      break;
    case uint8_t(Frame::Kind::kFound): {
      f.kind = Frame::Kind::kFound;
      f.request = r.u64();
      f.aid = r.u64();
      uint32_t n = r.count(4, kMaxInterfaceEntries, "interface");
      for (uint32_t i = 0; i < n && !r.failed(); ++i) {
        f.interface.push_back(r.str("interface entry"));
        if (!r.failed() && f.interface.back().size() > kMaxInterfaceEntryLength) {
          r.fail("interface entry too long");
        }
      }
      break;
    }
    case uint8_t(Frame::Kind::kMessage):
    case uint8_t(Frame::Kind::kInline): {
      f.kind = Frame::Kind(kind);
      f.source = r.u64();
      f.aid = r.u64();
      f.messageId = r.u64();
      if (f.kind == Frame::Kind::kInline) {
        f.body = r.str("inline message");  // no longer than the frame
        if (!r.failed() && f.body.size() > kMaxInlineBytes) r.fail("inline message too long");
      }
      caf::message_id mid(f.messageId);
      auto category = mid.category();
      if (!r.failed() && category != caf::message_id::urgent_message_category &&
          category != caf::message_id::normal_message_category) {
        r.fail("message id of a stream category");
      }
      if (!r.failed() && f.aid == 0) r.fail("message to actor 0");
      break;
    }
    case uint8_t(Frame::Kind::kDown):
      f.kind = Frame::Kind::kDown;
      f.aid = r.u64();
      f.code = r.u8();
      f.category = r.u64();
      f.reason = r.str("reason");
      if (!r.failed() && f.reason.size() > kMaxReasonLength) r.fail("reason too long");
      break;
    case uint8_t(Frame::Kind::kBeat):
      f.kind = Frame::Kind::kBeat;
      break;
    case uint8_t(Frame::Kind::kBye):
      f.kind = Frame::Kind::kBye;
      break;
    case uint8_t(Frame::Kind::kCredit):
      f.kind = Frame::Kind::kCredit;
      f.messages = r.u64();
      f.bytes = r.u64();
      break;
    case uint8_t(Frame::Kind::kLink):
    case uint8_t(Frame::Kind::kUnlink):
      f.kind = Frame::Kind(kind);
      f.source = r.u64();
      f.aid = r.u64();
      if (!r.failed() && (f.source == 0 || f.aid == 0)) r.fail("link of actor 0");
      break;
    case uint8_t(Frame::Kind::kWatch):
      f.kind = Frame::Kind::kWatch;
      f.aid = r.u64();
      if (!r.failed() && f.aid == 0) r.fail("watch of actor 0");
      break;
    default:
      r.fail("unknown kind " + std::to_string(kind));
  }
  return r.finish("node");
}

std::string encodeBatch(const std::vector<std::pair<std::string, uint32_t>>& frames) {
  size_t size = 4;
  for (const auto& f : frames) size += 8 + f.first.size();
  wire::Writer w(0, size);
  w.u32(static_cast<uint32_t>(frames.size()));
  for (const auto& f : frames) {
    w.str(f.first);
    w.u32(f.second);
  }
  return w.take();
}

Error decodeBatch(const std::string& bytes, std::vector<BatchEntry>& entries) {
  entries.clear();
  wire::Reader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  // Each frame takes at least its length, a version and a kind, and its
  // tensor count.
  uint32_t n = r.count(10, kMaxBatchFrames, "batch");
  if (!r.failed() && n == 0) r.fail("empty batch");
  entries.reserve(n);  // n is bounded by the bytes there are
  for (uint32_t i = 0; i < n && !r.failed(); ++i) {
    uint32_t length = r.u32();
    const uint8_t* frame = r.view(length, "frame");
    uint32_t tensors = r.u32();
    if (r.failed()) break;
    entries.emplace_back();
    if (Error bad = decodeFrame(frame, length, entries.back().frame)) return bad;
    if (entries.back().frame.kind != Frame::Kind::kMessage && tensors != 0) {
      r.fail("tensors on a frame that is not a MESSAGE");
    }
    entries.back().tensors = tensors;
  }
  return r.finish("node batch");
}

} // namespace actorpipe::remote::detail
