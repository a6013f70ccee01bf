// The bytes two nodes exchange, decoded from hostile input: node frames and
// CAF-encoded messages with their tensors (actors/remote/detail/).
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <actorpipe/actors/remote/detail/buffer_pool.h>
#include <actorpipe/actors/remote/detail/frames.h>
#include <actorpipe/actors/remote/detail/message_codec.h>
#include <actorpipe/actors/remote/detail/parked.h>
#include <actorpipe/actors/remote/node.h>

using namespace actorpipe;
using namespace actorpipe::remote::detail;

namespace {

struct System {
  System() {
    remote::configure(config);  // node ids: handles name their node
    config.set("scheduler.max-threads", 1);
    system.emplace(config);
  }
  caf::actor_system_config config;
  std::optional<caf::actor_system> system;
};

// A message header as CAF writes it (type names), then raw bytes.
std::vector<char> handMade(caf::actor_system& system, const std::string& types,
                           const std::string& rest) {
  std::vector<char> bytes;
  caf::binary_serializer sink(system, bytes);
  uint16_t zero = 0;
  std::string name = types;
  REQUIRE(!sink.begin_object(zero, name));
  bytes.insert(bytes.end(), rest.begin(), rest.end());
  return bytes;
}

Error decode(caf::actor_system& system, const std::vector<char>& bytes,
             std::vector<Tensor> tensors = {}) {
  caf::message out;
  return decodeMessage(system, bytes.data(), bytes.size(), std::move(tensors), out);
}

// A user's type whose inspect throws something that is not a
// std::exception (CAF calls it while encoding a message that holds one).
struct ThrowsWhenInspected {
  int value = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector&, ThrowsWhenInspected&) {
  throw 42;
}

} // namespace

TEST_CASE("frames round-trip and refuse what is not theirs") {
  Frame message;
  message.kind = Frame::Kind::kMessage;
  message.source = 7;
  message.aid = 9;
  message.messageId = caf::make_message_id(caf::message_priority::normal).integer_value() | 5;
  Frame back;
  REQUIRE(!decodeFrame(encodeFrame(message), back));
  CHECK(back.kind == Frame::Kind::kMessage);
  CHECK(back.source == 7);
  CHECK(back.aid == 9);
  CHECK(back.messageId == message.messageId);

  Frame found;
  found.kind = Frame::Kind::kFound;
  found.request = 3;
  found.aid = 4;
  found.interface = {"a", "b"};
  REQUIRE(!decodeFrame(encodeFrame(found), back));
  CHECK(back.interface == found.interface);

  std::string bytes = encodeFrame(message);
  SUBCASE("every truncation") {
    for (size_t n = 0; n < bytes.size(); ++n) {
      CAPTURE(n);
      CHECK(decodeFrame(bytes.substr(0, n), back));
    }
  }
  SUBCASE("trailing bytes") { CHECK(decodeFrame(bytes + "x", back)); }
  SUBCASE("another version") {
    bytes[0] = 1;  // the version before INLINE
    CHECK(decodeFrame(bytes, back));
  }
  SUBCASE("unknown kind") {
    bytes[1] = 99;
    CHECK(decodeFrame(bytes, back));
  }
  SUBCASE("a stream message id") {
    Frame stream = message;
    stream.messageId = uint64_t{3} << caf::message_id::category_offset;
    CHECK(decodeFrame(encodeFrame(stream), back).what().find("stream") != std::string::npos);
  }
  SUBCASE("a message to actor 0") {
    Frame zero = message;
    zero.aid = 0;
    CHECK(decodeFrame(encodeFrame(zero), back));
  }
  SUBCASE("INLINE: a message's bytes in the frame, bounded, no tensors") {
    Frame small = message;
    small.kind = Frame::Kind::kInline;
    small.body = std::string("\x01\x02hello\0bytes", 13);
    std::string encoded = encodeFrame(small);
    REQUIRE(!decodeFrame(encoded, back));
    CHECK(back.kind == Frame::Kind::kInline);
    CHECK(back.source == 7);
    CHECK(back.aid == 9);
    CHECK(back.messageId == message.messageId);
    CHECK(back.body == small.body);
    for (size_t n = 0; n < encoded.size(); ++n) CHECK(decodeFrame(encoded.substr(0, n), back));
    CHECK(decodeFrame(encoded + "x", back));
    // A length past the frame's end is refused before anything is copied.
    std::string longer = encoded;
    longer[longer.size() - small.body.size() - 4] = char(0xff);
    CHECK(decodeFrame(longer, back).what().find("inline message") != std::string::npos);
    small.body.assign(kMaxInlineBytes, 'x');
    CHECK(!decodeFrame(encodeFrame(small), back));
    small.body.push_back('x');
    CHECK(decodeFrame(encodeFrame(small), back).what().find("too long") != std::string::npos);
    small.body = "x";
    small.aid = 0;
    CHECK(decodeFrame(encodeFrame(small), back));
    small.aid = 9;
    small.messageId = uint64_t{3} << caf::message_id::category_offset;
    CHECK(decodeFrame(encodeFrame(small), back).what().find("stream") != std::string::npos);
    small.messageId = message.messageId;
    // It owns no tensors (they would come as a MESSAGE).
    std::vector<BatchEntry> entries;
    CHECK(!decodeBatch(encodeBatch({{encodeFrame(small), 0}}), entries));
    CHECK(decodeBatch(encodeBatch({{encodeFrame(small), 1}}), entries));
  }
  SUBCASE("LINK and UNLINK: both ids, neither 0, nothing after") {
    for (auto kind : {Frame::Kind::kLink, Frame::Kind::kUnlink}) {
      Frame link;
      link.kind = kind;
      link.source = 11;
      link.aid = 12;
      std::string encoded = encodeFrame(link);
      REQUIRE(!decodeFrame(encoded, back));
      CHECK(back.kind == kind);
      CHECK(back.source == 11);
      CHECK(back.aid == 12);
      for (size_t n = 0; n < encoded.size(); ++n) CHECK(decodeFrame(encoded.substr(0, n), back));
      CHECK(decodeFrame(encoded + "x", back));
      link.source = 0;
      CHECK(decodeFrame(encodeFrame(link), back));
      link.source = 11;
      link.aid = 0;
      CHECK(decodeFrame(encodeFrame(link), back));
    }
  }
  SUBCASE("WATCH: an id, not 0, nothing after; HELLO: a node id, not empty, bounded") {
    Frame watch;
    watch.kind = Frame::Kind::kWatch;
    watch.aid = 9;
    std::string encoded = encodeFrame(watch);
    REQUIRE(!decodeFrame(encoded, back));
    CHECK(back.kind == Frame::Kind::kWatch);
    CHECK(back.aid == 9);
    for (size_t n = 0; n < encoded.size(); ++n) CHECK(decodeFrame(encoded.substr(0, n), back));
    CHECK(decodeFrame(encoded + "x", back));
    watch.aid = 0;
    CHECK(decodeFrame(encodeFrame(watch), back));
    Frame hello;
    hello.kind = Frame::Kind::kHello;
    hello.identity = "a";
    hello.node = "n";
    REQUIRE(!decodeFrame(encodeFrame(hello), back));
    CHECK(back.node == "n");
    hello.node.clear();
    CHECK(decodeFrame(encodeFrame(hello), back));
    hello.node.assign(kMaxNodeIdLength + 1, 'n');
    CHECK(decodeFrame(encodeFrame(hello), back));
  }
  SUBCASE("HELLO's urls, WHERE and AT: a few printable URLs, a node id, nothing after") {
    Frame hello;
    hello.kind = Frame::Kind::kHello;
    hello.identity = "a";
    hello.node = "n";
    hello.urls = {"tcp://10.0.0.1:4000", "shm://x"};
    REQUIRE(!decodeFrame(encodeFrame(hello), back));
    CHECK(back.urls == hello.urls);
    Frame where;
    where.kind = Frame::Kind::kWhere;
    where.request = 3;
    where.node = "n";
    std::string encoded = encodeFrame(where);
    REQUIRE(!decodeFrame(encoded, back));
    CHECK(back.kind == Frame::Kind::kWhere);
    CHECK(back.request == 3);
    CHECK(back.node == "n");
    for (size_t n = 0; n < encoded.size(); ++n) CHECK(decodeFrame(encoded.substr(0, n), back));
    CHECK(decodeFrame(encoded + "x", back));
    where.node.clear();
    CHECK(decodeFrame(encodeFrame(where), back));
    Frame at;
    at.kind = Frame::Kind::kAt;
    at.request = 3;
    REQUIRE(!decodeFrame(encodeFrame(at), back));  // none: the peer has no link
    CHECK(back.urls.empty());
    at.urls = {"tcp://10.0.0.1:4000"};
    encoded = encodeFrame(at);
    REQUIRE(!decodeFrame(encoded, back));
    CHECK(back.urls == at.urls);
    for (size_t n = 0; n < encoded.size(); ++n) CHECK(decodeFrame(encoded.substr(0, n), back));
    CHECK(decodeFrame(encoded + "x", back));
    for (auto bad : {std::string("tcp://a b"), std::string(), std::string(kMaxUrlLength + 1, 'u'),
                     std::string("tcp://\x01")}) {
      at.urls = {bad};
      CHECK(decodeFrame(encodeFrame(at), back));
      hello.urls = {bad};
      CHECK(decodeFrame(encodeFrame(hello), back));
    }
    at.urls.assign(kMaxUrls + 1, "tcp://10.0.0.1:4000");
    CHECK(decodeFrame(encodeFrame(at), back));
    at.urls.resize(kMaxUrls);
    CHECK(!decodeFrame(encodeFrame(at), back));
  }
  SUBCASE("node ids: this system's round trip; garbage, trailing bytes and none refused") {
    System s;
    auto& system = *s.system;
    std::string bytes = encodeNodeId(system, system.node());
    caf::node_id id;
    REQUIRE(!decodeNodeId(system, bytes, id));
    CHECK(id == system.node());
    CHECK(decodeNodeId(system, bytes + "x", id));
    for (size_t n = 0; n < bytes.size(); ++n) CHECK(decodeNodeId(system, bytes.substr(0, n), id));
    CHECK(decodeNodeId(system, encodeNodeId(system, caf::node_id()), id));
  }
  SUBCASE("names: empty, spaces, control bytes, too long") {
    for (std::string name : {std::string(), std::string("a b"), std::string("a\nb"),
                             std::string(kMaxNameLength + 1, 'n')}) {
      Frame lookup;
      lookup.kind = Frame::Kind::kLookup;
      lookup.name = name;
      CHECK(decodeFrame(encodeFrame(lookup), back));
    }
  }
  SUBCASE("an interface count the bytes cannot hold") {
    std::string f = encodeFrame(found);
    // version, kind, request (8), aid (8), then the count
    f[18] = '\xff';
    f[19] = '\xff';
    CHECK(decodeFrame(f, back).what().find("implausible") != std::string::npos);
  }
}

TEST_CASE("messages with tensors round-trip; each tensor is put back once") {
  System s;
  auto& system = *s.system;
  Tensor a = Tensor::full<float>({2, 3}, 1.5f);
  Tensor b = Tensor::full<int64_t>({4}, int64_t(-3));
  caf::message m = caf::make_message(std::string("x"), a, int32_t(5), b, Tensor());
  EncodedMessage encoded;
  REQUIRE(!encodeMessage(system, m, encoded));
  REQUIRE(encoded.tensors.size() == 2);
  CHECK(encoded.tensors[0].sharesStorageWith(a));
  CHECK(encoded.tensors[1].sharesStorageWith(b));
  caf::message out;
  REQUIRE(!decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(), encoded.tensors, out));
  REQUIRE(out.match_elements<std::string, Tensor, int32_t, Tensor, Tensor>());
  CHECK(out.get_as<Tensor>(1).sharesStorageWith(a));
  CHECK(out.get_as<Tensor>(3).sharesStorageWith(b));
  CHECK(!out.get_as<Tensor>(4).defined());

  SUBCASE("a tensor missing, one left over, one used twice") {
    CHECK(decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(), {a}, out));
    CHECK(decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(), {a, b, a}, out)
              .what()
              .find("unused") != std::string::npos);
    caf::message twice = caf::make_message(a, a);
    EncodedMessage e2;
    REQUIRE(!encodeMessage(system, twice, e2));
    // Rewrite the second index to point at the first tensor.
    std::vector<char> bytes = e2.bytes;
    REQUIRE(bytes.size() >= 4);
    std::memset(bytes.data() + bytes.size() - 4, 0, 4);
    CHECK(decodeMessage(system, bytes.data(), bytes.size(), e2.tensors, out));
  }
  SUBCASE("every truncation fails cleanly") {
    for (size_t n = 0; n < encoded.bytes.size(); ++n) {
      CAPTURE(n);
      CHECK(decodeMessage(system, encoded.bytes.data(), n, encoded.tensors, out));
    }
  }
}

TEST_CASE("plain values take the compact form, anything else CAF's; both decode strictly") {
  // One actor system for every check (no SUBCASEs: each would start and stop
  // one, and CAF's middleman races with itself when stopped while starting).
  System s;
  auto& system = *s.system;
  caf::message all = caf::make_message(
      true, int8_t(-8), int16_t(-16), int32_t(-32), int64_t(-64), uint8_t(8), uint16_t(16),
      uint32_t(32), uint64_t(64), 1.5f, -2.25, std::string("text\0with a zero", 16),
      caf::atom("compact"), false);
  EncodedMessage encoded;
  REQUIRE(!encodeMessage(system, all, encoded));
  REQUIRE(!encoded.bytes.empty());
  CHECK(uint8_t(encoded.bytes[0]) == 0xA5);  // compact; CAF's form starts with 0
  caf::message out;
  REQUIRE(!decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(), {}, out));
  REQUIRE(out.match_elements<bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                             uint32_t, uint64_t, float, double, std::string, caf::atom_value,
                             bool>());
  CHECK(caf::to_string(out) == caf::to_string(all));
  // One element: made as CAF makes it (what a behavior's int64 handler takes).
  REQUIRE(!encodeMessage(system, caf::make_message(int64_t(1) << 40), encoded));
  CHECK(encoded.bytes.size() == 11);
  REQUIRE(!decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(), {}, out));
  REQUIRE(out.match_elements<int64_t>());
  CHECK(out.get_as<int64_t>(0) == int64_t(1) << 40);

  {  // other types, and more than 16 elements, go in CAF's form
    for (const caf::message& m :
         {caf::make_message(std::vector<std::string>{"a", "b"}), caf::make_message(int32_t(1), Tensor()),
          caf::make_message(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)}) {
      REQUIRE(!encodeMessage(system, m, encoded));
      CHECK(encoded.bytes.at(0) == 0);
      REQUIRE(!decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(), {}, out));
      CHECK(caf::to_string(out) == caf::to_string(m));
    }
  }
  {  // every truncation, trailing bytes, tensors beside it
    REQUIRE(!encodeMessage(system, all, encoded));
    for (size_t n = 0; n < encoded.bytes.size(); ++n) {
      CAPTURE(n);
      CHECK(decodeMessage(system, encoded.bytes.data(), n, {}, out));
    }
    std::vector<char> longer = encoded.bytes;
    longer.push_back(0);
    CHECK(decodeMessage(system, longer.data(), longer.size(), {}, out).what().find("trailing") !=
          std::string::npos);
    CHECK(decodeMessage(system, encoded.bytes.data(), encoded.bytes.size(),
                        {Tensor::zeros({1}, DType::kUint8)}, out)
              .what()
              .find("tensors") != std::string::npos);
  }
  {  // hand-made: counts, tags, a bool that is neither, a string past the end
    auto bad = [&](std::string bytes) {
      return decodeMessage(system, bytes.data(), bytes.size(), {}, out);
    };
    using namespace std::string_literals;
    CHECK(!bad("\xA5\x01\x03\x07\x00\x00\x00"s));   // one int32: 7
    CHECK(out.get_as<int32_t>(0) == 7);
    CHECK(bad("\xA5\x00"s));                          // no elements
    CHECK(bad("\xA5\x11"s + std::string(17 * 2, '\0')));  // 17 bools
    // Unknown tags, with enough bytes after them for any value.
    CHECK(bad("\xA5\x01\x0d"s + std::string(8, '\0')).what().find("tag 13") != std::string::npos);
    CHECK(bad("\xA5\x01\xff"s + std::string(8, '\0')).what().find("tag 255") != std::string::npos);
    CHECK(bad("\xA5\x02\x03\x07\x00\x00\x00"s).what().find("missing") != std::string::npos);
    CHECK(bad("\xA5\x01\x00\x02"s));                  // a bool of 2
    CHECK(!bad("\xA5\x01\x0b\x03\x00\x00\x00" "abc"s));
    CHECK(out.get_as<std::string>(0) == "abc");
    // A string claiming 4 GiB in 3 bytes: refused before anything is copied.
    CHECK(bad("\xA5\x01\x0b\xff\xff\xff\xff" "abc"s));
    CHECK(bad("\xA5\x02\x0b\x03\x00\x00\x00" "ab"s));
  }
}

TEST_CASE("a count the bytes cannot hold is refused before anything is allocated") {
  System s;
  auto& system = *s.system;
  // std::vector<char> (CAF's "@charbuf") announcing 2^32 - 1 bytes in none:
  // CAF's own deserializer would resize the vector to 4 GiB first.
  auto huge = handMade(system, "@<>+@charbuf", std::string("\xff\xff\xff\xff\x0f", 5));
  Error e = decode(system, huge);
  REQUIRE(e);
  CHECK(e.what().find("sequence of 4294967295") != std::string::npos);
  // A varint longer than five bytes (CAF shifts past 32 bits on it).
  auto longVarint = handMade(system, "@<>+@str", std::string(12, '\x80') + "\x01");
  CHECK(decode(system, longVarint).what().find("varint") != std::string::npos);
  // A string longer than what remains.
  auto shortString = handMade(system, "@<>+@str", std::string("\x10", 1) + "abc");
  CHECK(decode(system, shortString));
  // A type this system does not know.
  auto unknown = handMade(system, "@<>+no_such_type", "");
  CHECK(decode(system, unknown).what().find("undecodable") != std::string::npos);
  // A tensor index past the tensors received.
  auto index = handMade(system, "@<>+actorpipe::Tensor", std::string("\0\0\0\7", 4));
  CHECK(decode(system, index));
}

// Ends `actor` when the test case ends, passed or not: a handle CAF wrote
// keeps its actor in CAF's registry until the actor ends, and the actor
// system's end waits for it.
struct EndsWith {
  caf::actor actor;
  ~EndsWith() { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); }
};

TEST_CASE("system messages are neither sent to peers nor taken from them") {
  System s;
  auto& system = *s.system;
  // From one of this system's actors: a handle this node reads back itself
  // (a null one would need a link's proxy registry to decode).
  auto someone = system.spawn([]() -> caf::behavior { return {[](int32_t) {}}; });
  EndsWith end{someone};
  caf::message exit = caf::make_message(caf::exit_msg{someone.address(), caf::exit_reason::kill});
  CHECK(isSystemMessage(exit));
  CHECK(!isSystemMessage(caf::make_message(std::string("exit"))));
  EncodedMessage encoded;
  REQUIRE(!encodeMessage(system, exit, encoded));
  Error e = decode(system, encoded.bytes);
  REQUIRE(e);
  CHECK(e.what().find("system message") != std::string::npos);
}

TEST_CASE("actor handles: this node's come home as themselves; another node's need a link") {
  System a;
  System b;
  REQUIRE(a.system->node());
  REQUIRE(b.system->node());
  REQUIRE(a.system->node() != b.system->node());
  auto someone = a.system->spawn([]() -> caf::behavior { return {[](int32_t) {}}; });
  EndsWith end{someone};
  caf::message holding = caf::make_message(std::string("reply to"), someone);
  EncodedMessage encoded;
  REQUIRE(!encodeMessage(*a.system, holding, encoded));
  // Read back by its own node: the actor itself (CAF's registry).
  caf::message out;
  REQUIRE(!decodeMessage(*a.system, encoded.bytes.data(), encoded.bytes.size(), {}, out));
  REQUIRE(out.match_elements<std::string, caf::actor>());
  CHECK(out.get_as<caf::actor>(1) == someone);
  // Read by another node without a link's proxies: refused, not resolved
  // among that node's own actors.
  Error e = decode(*b.system, encoded.bytes);
  REQUIRE(e);
  CHECK(e.isOfType<ProtocolError>());
}

TEST_CASE("a Tensor outside a remote message is not serialized") {
  System s;
  auto& system = *s.system;
  std::vector<char> bytes;
  caf::binary_serializer sink(system, bytes);
  Tensor t = Tensor::zeros({1}, DType::kUint8);
  CHECK(sink(t));  // an error: CAF's middleman cannot carry a Tensor
}

TEST_CASE("the buffer pool hands a large block out again, keeps at most its capacity") {
  auto pool = std::make_shared<BufferPool>(5u << 20, 1u << 20);
  void* first = nullptr;
  {
    auto storage = pool->take(2u << 20);
    first = storage->data();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    CHECK(pool->cachedBytes() == 0);
  }
  CHECK(pool->cachedBytes() == (2u << 20));
  {
    auto again = pool->take(2u << 20);
    CHECK(again->data() == first);  // no new mapping, no page faults
    CHECK(pool->cachedBytes() == 0);
    auto other = pool->take(3u << 20);  // another size: a fresh block
    CHECK(other->data() != first);
  }
  CHECK(pool->cachedBytes() == (5u << 20));
  {
    auto a = pool->take(4u << 20);
    auto b = pool->take(4u << 20);
  }
  CHECK(pool->cachedBytes() <= (5u << 20));  // what would go over is freed
  {
    auto small = pool->take(100);
    CHECK(small->nbytes() == 100);
  }
  CHECK(pool->cachedBytes() <= (5u << 20));
  // A tensor may outlive its pool: its block is then freed (ASan watches).
  auto survivor = pool->take(2u << 20);
  pool.reset();
  survivor.reset();
}

TEST_CASE("batches of frames: counts, tensors only on messages, every truncation") {
  Frame hello;
  hello.kind = Frame::Kind::kHello;
  hello.identity = "a/b";
  hello.node = "n";
  Frame message;
  message.kind = Frame::Kind::kMessage;
  message.aid = 3;
  message.messageId = caf::make_message_id().integer_value();
  std::string bytes = encodeBatch({{encodeFrame(hello), 0}, {encodeFrame(message), 2}});
  std::vector<BatchEntry> entries;
  REQUIRE(!decodeBatch(bytes, entries));
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].frame.kind == Frame::Kind::kHello);
  CHECK(entries[1].frame.aid == 3);
  CHECK(entries[1].tensors == 2);
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK(decodeBatch(bytes.substr(0, n), entries));
  }
  CHECK(decodeBatch(bytes + "x", entries));
  CHECK(decodeBatch(encodeBatch({}), entries).what().find("empty") != std::string::npos);
  CHECK(decodeBatch(encodeBatch({{encodeFrame(hello), 1}}), entries).what().find("not a MESSAGE") !=
        std::string::npos);
  std::string huge = bytes;
  huge[0] = '\xff';
  huge[1] = '\xff';
  CHECK(decodeBatch(huge, entries).what().find("implausible") != std::string::npos);
}

TEST_CASE("input that makes CAF throw is a protocol error, not the end of the process") {
  System s;
  auto& system = *s.system;
  // Found by fuzzing: a config_value whose variant index is out of range
  // makes CAF 0.17's inspect throw std::runtime_error("invalid type found").
  auto bytes = handMade(system, "@<>+@config_value", std::string("\x23\0\0\0\x01\0\0", 7));
  Error e = decode(system, bytes);
  REQUIRE(e);
  CHECK(e.what().find("CAF threw") != std::string::npos);
}

// A peer's nesting is bounded: each level is a recursion in CAF's reader
// (and again in the destructor of what it built), so a payload of nested
// lists, two bytes a level, would overflow the loop thread's stack at a few
// tens of thousands of levels: a crash no catch can stop.
TEST_CASE("data nested deeper than the decoder's bound is refused, not a stack overflow") {
  using namespace std::string_literals;
  System s;
  auto& system = *s.system;
  // config_value: a variant tag (7: a list), then the list's count (1),
  // level after level; an integer (tag 0, 8 bytes) at the bottom.
  auto nested = [&](size_t levels) {
    std::string rest;
    for (size_t i = 0; i < levels; ++i) rest += "\x07\x01"s;
    rest += "\x00"s + std::string(8, '\0');
    return handMade(system, "@<>+@config_value", rest);
  };
  Error e = decode(system, nested(200000));
  REQUIRE(e);
  CHECK(e.what().find("nested deeper than") != std::string::npos);
  // Data nested as deep as real settings decode as before.
  CHECK(!decode(system, nested(0)));
  CHECK(!decode(system, nested(16)));
}

TEST_CASE("a user type whose inspect throws anything fails that send, not the process") {
  caf::actor_system_config config;
  remote::configure(config);
  config.add_message_type<ThrowsWhenInspected>("actorpipe_test_throws_when_inspected");
  config.set("scheduler.max-threads", 1);
  caf::actor_system system(config);
  EncodedMessage encoded;
  Error e = encodeMessage(system, caf::make_message(ThrowsWhenInspected{}), encoded);
  REQUIRE(e);
  CHECK(e.isOfType<LogicError>());
  CHECK(e.what().find("not a std::exception") != std::string::npos);
  // The encoder's state was put back: the next message encodes.
  EncodedMessage next;
  Tensor t = Tensor::full<float>({2}, 1.0f);
  REQUIRE(!encodeMessage(system, caf::make_message(std::string("after"), t), next));
  CHECK(next.tensors.size() == 1);
}

TEST_CASE("ParkedBook: shares per peer in requests and bytes; walks past departed requesters at most once per 10 ms") {
  using namespace std::chrono_literals;
  int walks = 0;
  auto walk = [&] { ++walks; };
  ParkedBook book(2, 100);
  auto a = book.take(1, 0, walk);
  auto b = book.take(1, 0, walk);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(!book.take(1, 0, walk));  // at its bound, nobody departed: no walk
  CHECK(walks == 0);
  CHECK(book.take(2, 0, walk));   // another peer's share is its own
  CHECK(book.take(0, 0, walk));   // and this node's actors'
  book.departed();
  auto walked = std::chrono::steady_clock::now();  // before the book's own clock
  CHECK(!book.take(1, 0, walk));  // one walk, which let nothing go
  CHECK(walks == 1);
  book.departed();
  CHECK(!book.take(1, 0, walk));
  // Within 10 ms of the last walk: none (checked only if the machine was
  // quick enough for the question to mean something).
  if (std::chrono::steady_clock::now() - walked < 10ms) CHECK(walks == 1);
  std::this_thread::sleep_for(15ms);
  book.departed();
  auto c = book.take(1, 0, [&] {  // a walk that lets one go: room
    ++walks;
    a.reset();
  });
  CHECK(c);
  b.reset();
  c.reset();
  // Bytes: 60 + 40 fit in 100, 60 + 60 do not; one larger than the bound
  // parks alone.
  auto x = book.take(3, 60, walk);
  REQUIRE(x);
  CHECK(!book.take(3, 60, walk));
  CHECK(book.take(3, 40, walk));
  auto big = book.take(4, 1000, walk);
  CHECK(big);
  CHECK(!book.take(4, 1, walk));
  big.reset();
  CHECK(book.take(4, 1, walk));  // tokens give back what they held
}

TEST_CASE("ParkedBook: entries of peers with nothing parked go once 256 peers, or twice the last kept, have one") {
  // A peer per link: links come and go, and each left an entry behind.
  ParkedBook book(2, 100);
  auto walk = [] {};
  for (uint64_t peer = 1; peer <= 1000; ++peer) CHECK(book.take(peer, 1, walk));  // let go at once
  CHECK(book.peersKept() <= 256);
  // Those with something parked stay, whatever their number; with 256 of
  // them the next walk waits until 512 peers have an entry.
  std::vector<ParkedBook::Token> held;
  for (uint64_t peer = 2000; peer < 2300; ++peer) held.push_back(book.take(peer, 1, walk));
  CHECK(book.peersKept() == 300);
  held.resize(1);
  for (uint64_t peer = 5000; peer < 5212; ++peer) CHECK(book.take(peer, 1, walk));
  CHECK(book.peersKept() == 512);
  // The next walks: 2000 stays, and the bound is back at 256.
  CHECK(book.take(6000, 1, walk));
  CHECK(book.peersKept() == 2);  // 2000 and 6000, none of the rest
  for (uint64_t peer = 7000; peer < 7254; ++peer) CHECK(book.take(peer, 1, walk));
  CHECK(book.peersKept() == 256);
  CHECK(book.take(8000, 1, walk));
  CHECK(book.peersKept() == 2);  // back at 256: walked
  // The one still held kept its count: one more request fills its share.
  auto second = book.take(2000, 1, walk);
  CHECK(second);
  CHECK(!book.take(2000, 1, walk));
}
