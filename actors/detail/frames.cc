#include <actorpipe/actors/detail/frames.h>

#include <algorithm>

namespace actorpipe::detail {
namespace {

constexpr size_t kFirstChunk = 64 * 1024;

void readMore(const std::shared_ptr<transport::Connection>& connection, std::vector<uint8_t>* body,
              size_t length, transport::Connection::read_callback_fn fn) {
  const size_t have = body->size();
  if (have == length) return fn(Error());
  const size_t next = std::min(length - have, std::max(kFirstChunk, have));
  body->resize(have + next);
  if (have + next == length) {
    // The last (for a small frame, the only) chunk: the caller's callback as
    // it is, which the connection keeps without an allocation.
    connection->read(body->data() + have, next, std::move(fn));
    return;
  }
  connection->read(body->data() + have, next, [connection, body, length, fn = std::move(fn)](const Error& e) mutable {
    if (e) return fn(e);
    readMore(connection, body, length, std::move(fn));
  });
}

}  // namespace

void readBody(const std::shared_ptr<transport::Connection>& connection, std::vector<uint8_t>* body,
              size_t length, transport::Connection::read_callback_fn fn) {
  body->clear();
  readMore(connection, body, length, std::move(fn));
}

void readFrame(const std::shared_ptr<transport::Connection>& connection, const Limits& limits,
               frame_fn fn) {
  struct State {
    uint8_t header[wire::kHeaderSize];
    wire::FrameHeader decoded;
    std::vector<uint8_t> body;
  };
  auto state = std::make_shared<State>();
  std::vector<uint8_t> none;
  connection->read(state->header, wire::kHeaderSize, [connection, limits, fn, state](const Error& e) {
    std::vector<uint8_t> empty;
    if (e) return fn(e, wire::FrameType::kHello, empty);
    if (auto error = wire::decodeHeader(state->header, limits, state->decoded)) {
      return fn(error, wire::FrameType::kHello, empty);
    }
    readBody(connection, &state->body, state->decoded.length, [fn, state](const Error& e) {
      fn(e, state->decoded.type, state->body);
    });
  });
}

} // namespace actorpipe::detail
