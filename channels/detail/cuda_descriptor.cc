#include <actorpipe/channels/detail/cuda_descriptor.h>

#include <cinttypes>
#include <cstdio>

#include <actorpipe/channels/detail/pull_descriptor.h>

namespace actorpipe::channel::detail {
namespace {

constexpr size_t kHex = 2 * kIpcHandleBytes;
constexpr size_t kMaxLength = 6 * 21 + 2 * kHex;

void toHex(const std::array<uint8_t, kIpcHandleBytes>& bytes, std::string& out) {
  static const char digits[] = "0123456789abcdef";
  for (uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
}

int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // lower case only: one spelling per value
}

bool fromHex(const char* at, std::array<uint8_t, kIpcHandleBytes>& out) {
  for (size_t i = 0; i < kIpcHandleBytes; ++i) {
    int hi = nibble(at[2 * i]);
    int lo = nibble(at[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

std::string formatCudaIpcDescriptor(const CudaIpcDescriptor& d) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":", d.seq,
                d.length, d.offset, d.bufferId, d.ackFd, d.slot);
  std::string out(buf);
  out.reserve(out.size() + 2 * kHex);
  toHex(d.memory, out);
  toHex(d.event, out);
  return out;
}

Error parseCudaIpcDescriptor(const std::string& text, CudaIpcDescriptor& out) {
  auto bad = [&](const char* why) {
    return ACTORPIPE_ERROR(ProtocolError, std::string("bad cuda_ipc descriptor (") + why + "): '" +
                                              text.substr(0, 80) + "'");
  };
  if (text.size() > kMaxLength || text.size() < 2 * kHex + 1) return bad("length");
  const char* begin = text.data();
  const char* handles = begin + text.size() - 2 * kHex;
  if (handles[-1] != ':') return bad("fields");
  const int bases[] = {10, 10, 10, 10, 10, 10};
  uint64_t v[6] = {0, 0, 0, 0, 0, 0};
  if (!parseFields(begin, handles - 1, bases, 6, v)) return bad("fields");
  CudaIpcDescriptor d;
  d.seq = v[0];
  d.length = v[1];
  d.offset = v[2];
  d.bufferId = v[3];
  d.ackFd = v[4];
  d.slot = v[5];
  if (d.slot > kNoEvent) return bad("event slot");
  if (d.ackFd > 0x7fffffff) return bad("ack fd");
  if (d.offset + d.length < d.offset) return bad("offset");
  if (!fromHex(handles, d.memory) || !fromHex(handles + kHex, d.event)) return bad("handles");
  out = d;
  return Error();
}

} // namespace actorpipe::channel::detail
