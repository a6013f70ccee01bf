#include <actorpipe/channels/detail/pull_descriptor.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>

namespace actorpipe::channel::detail {
namespace {

// One field: 1 to 20 digits of `base`, nothing else (from_chars alone
// accepts none of '+', spaces or "0x", and reports overflow).
bool field(const char*& at, const char* end, int base, uint64_t& value) {
  const char* stop = at;
  while (stop != end && *stop != ':') ++stop;
  if (stop == at || stop - at > 20) return false;
  auto [ptr, ec] = std::from_chars(at, stop, value, base);
  if (ec != std::errc() || ptr != stop) return false;
  at = stop;
  return true;
}

}  // namespace

std::string formatPullDescriptor(const PullDescriptor& d, PullFormat format) {
  char buf[96];
  if (format == PullFormat::kInProcess) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%" PRIu64, d.seq, d.length);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%" PRIu64 ":%" PRIx64 ":%" PRIx64, d.seq, d.length,
                  d.address, d.ack);
  }
  return buf;
}

Error parsePullDescriptor(const std::string& text, PullFormat format, const std::string& channel,
                          PullDescriptor& out) {
  const char* at = text.data();
  const char* end = at + text.size();
  PullDescriptor d;
  struct Field {
    uint64_t* value;
    int base;
  };
  Field fields[] = {{&d.seq, 10}, {&d.length, 10}, {&d.address, 16}, {&d.ack, 16}};
  const size_t count = format == PullFormat::kInProcess ? 2 : 4;
  bool ok = text.size() <= 80;
  for (size_t i = 0; ok && i < count; ++i) {
    if (i > 0) {
      ok = at != end && *at == ':';
      if (!ok) break;
      ++at;
    }
    ok = field(at, end, fields[i].base, *fields[i].value);
  }
  if (!ok || at != end) {
    return ACTORPIPE_ERROR(ProtocolError, "bad " + channel + " descriptor '" + text.substr(0, 80) + "'");
  }
  out = d;
  return Error();
}

} // namespace actorpipe::channel::detail
