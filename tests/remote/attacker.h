#pragma once
// A hand-made peer for the remote tests: it speaks the node protocol's
// frames itself (detail/frames.h) over a pipe of its own, to attack a node.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "../support/harness.h"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message_id.hpp>
#include <caf/node_id.hpp>

#include <actorpipe/actors/remote/detail/frames.h>
#include <actorpipe/actors/remote/detail/message_codec.h>
#include <actorpipe/actors/remote/node.h>

namespace remote_test {

// The CAF node id the hand-made peer claims in its HELLO.
inline caf::node_id attackerNode() {
  caf::node_id::default_data::host_id_type host;
  host.fill(0xa7);
  return caf::make_node_id(4242, host);
}

// A node id as CAF serializes it.
inline std::vector<char> nodeIdBytes(const caf::node_id& id) {
  std::vector<char> out;
  caf::binary_serializer sink(nullptr, out);
  REQUIRE(!sink(const_cast<caf::node_id&>(id)));
  return out;
}

// A hand-made peer: the pipe message of a batch of `frames`.
inline actorpipe::Message frameMessage(const std::vector<actorpipe::remote::detail::Frame>& frames) {
  using namespace actorpipe::remote::detail;
  std::vector<std::pair<std::string, uint32_t>> encoded;
  for (const auto& f : frames) encoded.emplace_back(encodeFrame(f), 0);
  actorpipe::Message m;
  m.metadata = encodeBatch(encoded);
  return m;
}

// A hand-made peer's message body, encoded as a node would (the codec
// reads types through an actor system: one of the peer's own).
inline actorpipe::remote::detail::EncodedMessage attackerBody(const caf::message& message) {
  caf::actor_system_config cfg;
  actorpipe::remote::configure(cfg);
  caf::actor_system system{cfg};
  actorpipe::remote::detail::EncodedMessage body;
  REQUIRE(!actorpipe::remote::detail::encodeMessage(system, message, body));
  return body;
}

// A hand-made peer says HELLO ("my window is huge"; `node` is the CAF node
// id it claims) and looks `name` up on `pipe`'s node; returns the actor's id.
inline uint64_t attackerHello(actorpipe::Pipe& pipe, const std::string& name,
                              const caf::node_id& claimed = attackerNode()) {
  using namespace actorpipe::remote::detail;
  Frame hello;
  hello.kind = Frame::Kind::kHello;
  hello.identity = "attacker";
  hello.pid = 1;
  auto node = nodeIdBytes(claimed);
  hello.node.assign(node.begin(), node.end());
  hello.messages = 1u << 30;
  hello.bytes = uint64_t{1} << 40;
  REQUIRE(!testing::writeSync(pipe, frameMessage({hello})));
  Frame lookup;
  lookup.kind = Frame::Kind::kLookup;
  lookup.request = 1;
  lookup.name = name;
  REQUIRE(!testing::writeSync(pipe, frameMessage({lookup})));
  uint64_t target = 0;
  for (int i = 0; i < 2 && target == 0; ++i) {  // HELLO, then FOUND
    auto got = testing::readSync(pipe);
    REQUIRE(!got.error);
    std::vector<BatchEntry> entries;
    REQUIRE(!decodeBatch(got.descriptor.metadata, entries));
    for (auto& entry : entries) {
      if (entry.frame.kind == Frame::Kind::kFound) target = entry.frame.aid;
    }
  }
  REQUIRE(target != 0);
  return target;
}

// A hand-made peer reads what the node sends until a frame matches
// `wanted` (true), for up to `batches` batches of 10 s each (false).
inline bool awaitFrame(actorpipe::Pipe& pipe,
                       const std::function<bool(const actorpipe::remote::detail::Frame&)>& wanted,
                       int batches = 20) {
  using namespace actorpipe::remote::detail;
  for (int i = 0; i < batches; ++i) {
    auto got = testing::readSync(pipe, std::chrono::seconds(10));
    REQUIRE(!got.error);
    std::vector<BatchEntry> entries;
    REQUIRE(!decodeBatch(got.descriptor.metadata, entries));
    for (auto& entry : entries) {
      if (wanted(entry.frame)) return true;
    }
  }
  return false;
}

// A hand-made peer's request `request` from its actor `source` to the
// actor `target`.
// (Encoded with `system`'s types, at once: a hand-made peer says nothing
// else meanwhile, and a node with quick heartbeats cuts it within 600 ms.)
inline void attackerAsk(actorpipe::Pipe& pipe, caf::actor_system& system, uint64_t target, uint64_t source,
                        uint64_t request, const caf::message& content) {
  using namespace actorpipe::remote::detail;
  Frame f;
  f.kind = Frame::Kind::kMessage;
  f.source = source;
  f.aid = target;
  f.messageId = caf::make_message_id(caf::message_priority::normal).integer_value() | request;
  EncodedMessage body;
  REQUIRE(!encodeMessage(system, content, body));
  actorpipe::Message m = frameMessage({f});
  m.payloads.push_back({body.bytes.data(), body.bytes.size(), ""});
  REQUIRE(!testing::writeSync(pipe, std::move(m)));
}

// The hand-made peer reads until `count` answers to its actor `source`
// came (MESSAGE or INLINE frames) (an actor answers one sender's requests in order).
inline bool attackerAnswered(actorpipe::Pipe& pipe, uint64_t source, int count) {
  using actorpipe::remote::detail::Frame;
  int seen = 0;
  return awaitFrame(pipe, [&](const Frame& f) {
    bool message = f.kind == Frame::Kind::kMessage || f.kind == Frame::Kind::kInline;
    return message && f.aid == source && ++seen == count;
  });
}

} // namespace remote_test
