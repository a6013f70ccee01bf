#pragma once
// What a pull channel's sender puts in the message frame for each tensor,
// and the strict parser its receiver runs on it (the frame is the peer's:
// every field is hostile). No CAF here: the fuzz target pull_descriptor
// links this file alone.
//
//   xth (one process):  "seq:length"                 decimal
//   cma (one host):     "seq:length:address:ack:assist"
//                       decimal, decimal, hex, hex, decimal
//
// xth names no address at all: the receiver finds the bytes in its linked
// sender's table of pending exports by sequence number. cma must name
// addresses (they are in the sender's address space), but never a pid: the
// receiver reads only from the process the kernel says is at the other end.
#include <cstdint>
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::channel::detail {

struct PullDescriptor {
  uint64_t seq{0};
  uint64_t length{0};
  uint64_t address{0};  // cma only
  uint64_t ack{0};      // cma only: the sender's acknowledgement word
  uint64_t assist{0};   // cma only: the sender's assist page's fd + 1, or 0 (cma_assist.h)
};

enum class PullFormat { kInProcess, kCrossProcess };

std::string formatPullDescriptor(const PullDescriptor& d, PullFormat format);
// Exactly the format's fields, digits only, no sign, no overflow, nothing
// after: anything else is a ProtocolError naming `channel`.
// The fields alone: exactly `count` of them, ':'-separated, each 1 to 20
// digits of its base, and nothing after (also the CUDA channels' parser).
bool parseFields(const char* at, const char* end, const int* bases, size_t count, uint64_t* values);
Error parsePullDescriptor(const std::string& text, PullFormat format, const std::string& channel,
                          PullDescriptor& out);

} // namespace actorpipe::channel::detail
