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

bool parseFields(const char* at, const char* end, const int* bases, size_t count, uint64_t* values) {
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) {
      if (at == end || *at != ':') return false;
      ++at;
    }
    if (!field(at, end, bases[i], values[i])) return false;
  }
  return at == end;
}

std::string formatPullDescriptor(const PullDescriptor& d, PullFormat format) {
  char buf[112];
  if (format == PullFormat::kInProcess) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%" PRIu64, d.seq, d.length);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%" PRIu64 ":%" PRIx64 ":%" PRIx64 ":%" PRIu64, d.seq, d.length,
                  d.address, d.ack, d.assist);
  }
  return buf;
}

Error parsePullDescriptor(const std::string& text, PullFormat format, const std::string& channel,
                          PullDescriptor& out) {
  const char* at = text.data();
  const char* end = at + text.size();
  const int bases[] = {10, 10, 16, 16, 10};
  uint64_t values[5] = {0, 0, 0, 0, 0};
  const size_t count = format == PullFormat::kInProcess ? 2 : 5;
  const bool ok = text.size() <= 104 && parseFields(at, end, bases, count, values);
  if (!ok) {
    return ACTORPIPE_ERROR(ProtocolError, "bad " + channel + " descriptor '" + text.substr(0, 80) + "'");
  }
  out = PullDescriptor{values[0], values[1], values[2], values[3], values[4]};
  return Error();
}

} // namespace actorpipe::channel::detail
