#pragma once
// Reading one whole frame (header, then body) off a connection.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <actorpipe/runtime/detail/wire.h>
#include <actorpipe/transports/context.h>

namespace actorpipe::detail {

using frame_fn = std::function<void(const Error&, wire::FrameType, std::vector<uint8_t>& body)>;

// Reads `length` bytes into `*body` (emptied first), growing it as they
// arrive: 64 KiB, then doubling. A peer that announces a large frame and
// sends little makes us hold what it sent, not what it announced. `*body`
// must outlive `fn` (the caller's state, captured in `fn`, owns it).
void readBody(const std::shared_ptr<transport::Connection>& connection, std::vector<uint8_t>* body,
              size_t length, transport::Connection::read_callback_fn fn);

// `limits.maxFrameSize` bounds the body; checked before any of it is read.
void readFrame(const std::shared_ptr<transport::Connection>& connection, const Limits& limits,
               frame_fn fn);

// Before the handshake a peer is a stranger: it gets a small frame budget.
inline Limits handshakeLimits(Limits limits) {
  constexpr size_t kHandshakeFrameLimit = 64 * 1024;
  if (limits.maxFrameSize > kHandshakeFrameLimit) limits.maxFrameSize = kHandshakeFrameLimit;
  return limits;
}

// Header and body in one string, ready to write.
template <typename T>
std::string frameOf(wire::FrameType type, const T& value) {
  std::string body = wire::encode(value);
  return wire::encodeHeader(type, body.size()) + body;
}

} // namespace actorpipe::detail
