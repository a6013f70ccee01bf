#include <actorpipe/actors/group/frames.h>

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
      if (!r.failed() && (role < uint8_t(LinkFrame::Role::kTree) || role > uint8_t(LinkFrame::Role::kCube))) {
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
      if (!r.failed() && (cause < uint8_t(LinkFrame::Cause::kRankFailed) || cause > uint8_t(LinkFrame::Cause::kTimeout))) {
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

}  // namespace actorpipe::group
