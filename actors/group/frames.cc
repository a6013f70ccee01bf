#include <actorpipe/actors/group/frames.h>

#include <actorpipe/actors/group/errors.h>
#include <actorpipe/runtime/detail/codec.h>

namespace actorpipe::group {

LinkFrame LinkFrame::introduce(Role role, int rank) {
  LinkFrame f;
  f.kind = Kind::kIntroduce;
  f.role = role;
  f.rank = rank;
  return f;
}

LinkFrame LinkFrame::refuse(std::string reason) {
  LinkFrame f;
  f.kind = Kind::kRefuse;
  f.reason = std::move(reason);
  return f;
}

LinkFrame LinkFrame::data(uint64_t collective, uint64_t index, int contributors) {
  LinkFrame f;
  f.kind = Kind::kData;
  f.collective = collective;
  f.index = index;
  f.contributors = contributors;
  return f;
}

LinkFrame LinkFrame::abort(uint64_t collective, Cause cause, int rank, std::string reason) {
  LinkFrame f;
  f.kind = Kind::kAbort;
  f.collective = collective;
  f.cause = cause;
  f.rank = rank;
  f.reason = std::move(reason);
  return f;
}

LinkFrame LinkFrame::bye() { return LinkFrame(); }

std::string LinkFrame::describe() const {
  switch (kind) {
    case Kind::kIntroduce: return "an introduction as rank " + std::to_string(rank);
    case Kind::kRefuse: return "a refusal (" + reason + ")";
    case Kind::kData:
      return "data of collective #" + std::to_string(collective) + ", index " + std::to_string(index) +
             ", " + std::to_string(contributors) + " contributor(s)";
    case Kind::kAbort: return "an abort of collective #" + std::to_string(collective);
    case Kind::kBye: return "a goodbye";
  }
  return "an unknown frame";
}

std::string encode(const LinkFrame& f) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(f.kind));
  switch (f.kind) {
    case LinkFrame::Kind::kIntroduce:
      w.u8(static_cast<uint8_t>(f.role));
      w.u32(static_cast<uint32_t>(f.rank));
      break;
    case LinkFrame::Kind::kRefuse:
      w.str(f.reason.substr(0, kMaxLinkFrameReason));
      break;
    case LinkFrame::Kind::kData:
      w.u64(f.collective);
      w.u64(f.index);
      w.u32(static_cast<uint32_t>(f.contributors));
      break;
    case LinkFrame::Kind::kAbort:
      w.u64(f.collective);
      w.u8(static_cast<uint8_t>(f.cause));
      w.u32(static_cast<uint32_t>(f.rank));
      w.str(f.reason.substr(0, kMaxLinkFrameReason));
      break;
    case LinkFrame::Kind::kBye:
      break;
  }
  return w.take();
}

Error decode(const std::string& bytes, LinkFrame& out) {
  wire::Reader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  LinkFrame f;
  const uint8_t kind = r.u8();
  auto reason = [&](const char* what) {
    std::string text = r.str(what);
    if (text.size() > kMaxLinkFrameReason) r.fail(std::string(what) + " longer than " + std::to_string(kMaxLinkFrameReason));
    return text;
  };
  auto nonNegative = [&](uint32_t v, const char* what) {
    if (v > 0x7fffffffu) r.fail(std::string("negative ") + what);
    return static_cast<int32_t>(v);
  };
  switch (kind) {
    case uint8_t(LinkFrame::Kind::kIntroduce): {
      f.kind = LinkFrame::Kind::kIntroduce;
      const uint8_t role = r.u8();
      if (!r.failed() && (role < uint8_t(LinkFrame::Role::kTree) || role > uint8_t(LinkFrame::Role::kClient))) {
        r.fail("unknown link role " + std::to_string(role));
      }
      f.role = static_cast<LinkFrame::Role>(role);
      f.rank = nonNegative(r.u32(), "rank");
      break;
    }
    case uint8_t(LinkFrame::Kind::kRefuse):
      f.kind = LinkFrame::Kind::kRefuse;
      f.reason = reason("refusal");
      break;
    case uint8_t(LinkFrame::Kind::kData):
      f.kind = LinkFrame::Kind::kData;
      f.collective = r.u64();
      f.index = r.u64();
      f.contributors = nonNegative(r.u32(), "contributor count");
      break;
    case uint8_t(LinkFrame::Kind::kAbort): {
      f.kind = LinkFrame::Kind::kAbort;
      f.collective = r.u64();
      const uint8_t cause = r.u8();
      if (!r.failed() && (cause < uint8_t(LinkFrame::Cause::kRankFailed) || cause > uint8_t(LinkFrame::Cause::kOther))) {
        r.fail("unknown abort cause " + std::to_string(cause));
      }
      f.cause = static_cast<LinkFrame::Cause>(cause);
      const uint32_t rank = r.u32();
      f.rank = rank == 0xffffffffu ? -1 : nonNegative(rank, "rank");
      f.reason = reason("abort reason");
      break;
    }
    case uint8_t(LinkFrame::Kind::kBye):
      f.kind = LinkFrame::Kind::kBye;
      break;
    default:
      if (!r.failed()) r.fail("unknown kind " + std::to_string(kind));
  }
  Error error = r.finish("group link");
  if (!error) out = std::move(f);
  return error;
}

RendezvousFrame RendezvousFrame::hello(int rank, int worldSize, Member member) {
  RendezvousFrame f;
  f.kind = Kind::kHello;
  f.rank = rank;
  f.worldSize = worldSize;
  f.member = std::move(member);
  return f;
}

RendezvousFrame RendezvousFrame::tableOf(std::vector<Member> members) {
  RendezvousFrame f;
  f.kind = Kind::kTable;
  f.table = std::move(members);
  return f;
}

RendezvousFrame RendezvousFrame::failure(std::string reason) {
  RendezvousFrame f;
  f.kind = Kind::kFailure;
  f.reason = std::move(reason);
  return f;
}

namespace {

void writeMember(wire::Writer& w, const Member& m) {
  w.str(m.host);
  w.str(m.url);
}

// Printable ASCII, no spaces: these end up in logs, error messages and
// connect() calls.
bool printable(const std::string& text) {
  for (unsigned char c : text) {
    if (c <= ' ' || c >= 0x7f) return false;
  }
  return true;
}

Member readMember(wire::Reader& r) {
  Member m;
  m.host = r.str("host");
  m.url = r.str("url");
  if (r.failed()) return m;
  if (m.host.empty() || m.host.size() > kMaxHostBytes || !printable(m.host)) {
    r.fail("a host name that is empty, longer than " + std::to_string(kMaxHostBytes) +
           " bytes, or not printable");
  } else if (m.url.empty() || m.url.size() > kMaxUrlBytes || !printable(m.url)) {
    r.fail("a URL that is empty, longer than " + std::to_string(kMaxUrlBytes) + " bytes, or not printable");
  }
  return m;
}

}  // namespace

std::string encode(const RendezvousFrame& f) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(f.kind));
  switch (f.kind) {
    case RendezvousFrame::Kind::kHello:
      w.u32(static_cast<uint32_t>(f.rank));
      w.u32(static_cast<uint32_t>(f.worldSize));
      writeMember(w, f.member);
      break;
    case RendezvousFrame::Kind::kTable:
      w.u32(static_cast<uint32_t>(f.table.size()));
      for (const auto& m : f.table) writeMember(w, m);
      break;
    case RendezvousFrame::Kind::kFailure:
      w.str(f.reason.substr(0, kMaxLinkFrameReason));
      break;
  }
  return w.take();
}

Error decode(const std::string& bytes, RendezvousFrame& out) {
  wire::Reader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  RendezvousFrame f;
  const uint8_t kind = r.u8();
  switch (kind) {
    case uint8_t(RendezvousFrame::Kind::kHello): {
      f.kind = RendezvousFrame::Kind::kHello;
      const uint32_t rank = r.u32();
      const uint32_t size = r.u32();
      if (!r.failed() && (size == 0 || size > uint32_t(kMaxWorldSize) || rank >= size)) {
        r.fail("rank " + std::to_string(rank) + " of a world of " + std::to_string(size));
      }
      f.rank = static_cast<int32_t>(rank);
      f.worldSize = static_cast<int32_t>(size);
      f.member = readMember(r);
      break;
    }
    case uint8_t(RendezvousFrame::Kind::kTable): {
      f.kind = RendezvousFrame::Kind::kTable;
      // Each member is at least two 4-byte lengths and two bytes.
      const uint32_t n = r.count(10, kMaxWorldSize, "table member");
      if (!r.failed() && n == 0) r.fail("an empty table");
      f.table.reserve(n);
      for (uint32_t i = 0; i < n && !r.failed(); ++i) f.table.push_back(readMember(r));
      break;
    }
    case uint8_t(RendezvousFrame::Kind::kFailure): {
      f.kind = RendezvousFrame::Kind::kFailure;
      f.reason = r.str("failure");
      if (!r.failed() && f.reason.size() > kMaxLinkFrameReason) {
        r.fail("failure longer than " + std::to_string(kMaxLinkFrameReason));
      }
      break;
    }
    default:
      if (!r.failed()) r.fail("unknown kind " + std::to_string(kind));
  }
  Error error = r.finish("group rendezvous");
  if (!error) out = std::move(f);
  return error;
}

LinkFrame abortFrame(uint64_t collective, const Error& error) {
  if (auto failed = error.castToType<RankFailedError>()) {
    return LinkFrame::abort(collective, LinkFrame::Cause::kRankFailed, failed->rank(), failed->reason());
  }
  if (auto logic = error.castToType<LogicError>()) {
    return LinkFrame::abort(collective, LinkFrame::Cause::kLogic, -1, logic->reason());
  }
  if (auto timeout = error.castToType<TimeoutError>()) {
    return LinkFrame::abort(collective, LinkFrame::Cause::kTimeout, -1, timeout->reason());
  }
  if (auto protocol = error.castToType<ProtocolError>()) {
    return LinkFrame::abort(collective, LinkFrame::Cause::kProtocol, -1, protocol->reason());
  }
  return LinkFrame::abort(collective, LinkFrame::Cause::kOther, -1, error.what());
}

Error abortError(const LinkFrame& frame) {
  switch (frame.cause) {
    case LinkFrame::Cause::kRankFailed:
      return ACTORPIPE_ERROR(RankFailedError, frame.rank, frame.reason);
    case LinkFrame::Cause::kLogic:
      return ACTORPIPE_ERROR(LogicError, frame.reason);
    case LinkFrame::Cause::kTimeout:
      return ACTORPIPE_ERROR(TimeoutError, frame.reason);
    case LinkFrame::Cause::kProtocol:
      return ACTORPIPE_ERROR(ProtocolError, frame.reason);
    case LinkFrame::Cause::kOther:
      break;
  }
  return ACTORPIPE_ERROR(AbortedError, frame.reason);
}

}  // namespace actorpipe::group
