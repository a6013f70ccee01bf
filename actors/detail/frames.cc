#include <actorpipe/actors/detail/frames.h>

namespace actorpipe::detail {

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
    state->body.resize(state->decoded.length);
    connection->read(state->body.data(), state->body.size(), [fn, state](const Error& e) {
      fn(e, state->decoded.type, state->body);
    });
  });
}

} // namespace actorpipe::detail
