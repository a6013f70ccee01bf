// The wire format on its own: round trips, and every truncation and limit
// turned into an Error rather than a crash or a large allocation.
#include <doctest/doctest.h>

#include <actorpipe/runtime/detail/wire.h>

using namespace actorpipe;
using namespace actorpipe::wire;

namespace {

MessageFrame sample() {
  MessageFrame f;
  f.descriptor.metadata = "meta";
  f.descriptor.payloads.push_back({10, "p0"});
  f.descriptor.payloads.push_back({0, ""});
  f.descriptor.tensors.push_back({4096, Device{kCpuDeviceType, 0}, Device{kCudaDeviceType, 1}, "t0"});
  f.descriptor.tensors.push_back({7, Device{kCpuDeviceType, 0}, nullopt, ""});
  f.routes.push_back({"basic", true, ""});
  f.routes.push_back({"basic", true, "x"});
  return f;
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace

TEST_CASE("message frames round-trip") {
  std::string body = encode(sample());
  MessageFrame out;
  REQUIRE(!decode(bytes(body), body.size(), Limits(), out));
  CHECK(out.descriptor.metadata == "meta");
  REQUIRE(out.descriptor.payloads.size() == 2);
  CHECK(out.descriptor.payloads[0].length == 10);
  CHECK(out.descriptor.payloads[0].metadata == "p0");
  REQUIRE(out.descriptor.tensors.size() == 2);
  CHECK(out.descriptor.tensors[0].length == 4096);
  CHECK(out.descriptor.tensors[0].targetDevice == Device{kCudaDeviceType, 1});
  CHECK(!out.descriptor.tensors[1].targetDevice);
  CHECK(out.routes[1].channelDescriptor == "x");
}

TEST_CASE("a message as sent is its header and its body, in one string") {
  for (MessageFrame f : {sample(), MessageFrame()}) {
    const std::string body = encode(f);
    const std::string framed = encodeMessage(f);
    CHECK(framed == encodeHeader(FrameType::kMessage, body.size()) + body);
    FrameHeader header;
    REQUIRE(!decodeHeader(bytes(framed), Limits(), header));
    CHECK(header.type == FrameType::kMessage);
    CHECK(header.length == body.size());
  }
}

// A pipe encodes each message into the string of the one before and
// decodes it over the frame of the one before: nothing of the last message
// may show through (more tensors, a target device, longer strings).
TEST_CASE("a message encoded and decoded over the last one is the message alone") {
  MessageFrame small;
  small.descriptor.metadata = "m";
  small.descriptor.tensors.push_back({3, Device{kCpuDeviceType, 0}, nullopt, "t"});
  small.routes.push_back({"cma", false, ""});
  std::string framed = encodeMessage(sample());
  encodeMessage(small, framed);
  CHECK(framed == encodeMessage(small));
  MessageFrame reused;
  std::string big = encode(sample());
  REQUIRE(!decode(bytes(big), big.size(), Limits(), reused));
  const std::string body = encode(small);
  REQUIRE(!decode(bytes(body), body.size(), Limits(), reused));
  CHECK(encode(reused) == body);
  CHECK(reused.descriptor.payloads.empty());
  REQUIRE(reused.descriptor.tensors.size() == 1);
  CHECK(!reused.descriptor.tensors[0].targetDevice);
  CHECK(reused.descriptor.tensors[0].metadata == "t");
  CHECK(!reused.routes[0].inlineData);
  CHECK(reused.routes[0].channelDescriptor.empty());
}

TEST_CASE("hello and welcome round-trip") {
  Hello h{"ctx", {{"tcp", 3, "tcp", {}, ""}}, {{"cma", -2, "any", {"cpu"}, "1:2:3"}}};
  std::string body = encode(h);
  Hello out;
  REQUIRE(!decode(bytes(body), body.size(), Limits(), out));
  CHECK(out.contextName == "ctx");
  REQUIRE(out.channels.size() == 1);
  CHECK(out.channels[0].priority == -2);
  CHECK(out.channels[0].deviceTypes == std::vector<std::string>{"cpu"});
  CHECK(out.channels[0].detail == "1:2:3");
  Welcome w;
  w.contextName = "srv";
  w.transport = "shm";
  w.channels = {{"cpu", "basic"}};
  w.setups = {{"mpt", "lane setup"}};
  w.address = "abcde";
  w.joinToken = 0x0123456789abcdefull;
  w.notes = {"transport shm: chosen"};
  body = encode(w);
  Welcome wout;
  REQUIRE(!decode(bytes(body), body.size(), Limits(), wout));
  CHECK(wout.channels[0].second == "basic");
  REQUIRE(wout.setups.size() == 1);
  CHECK(wout.setups[0].second == "lane setup");
  CHECK(wout.address == "abcde");
  CHECK(wout.joinToken == 0x0123456789abcdefull);
  CHECK(wout.notes == std::vector<std::string>{"transport shm: chosen"});
}

TEST_CASE("every truncation of a frame is a protocol error") {
  std::string body = encode(sample());
  for (size_t n = 0; n < body.size(); ++n) {
    MessageFrame out;
    Error e = decode(bytes(body), n, Limits(), out);
    REQUIRE_MESSAGE(e, "truncated at " << n);
    CHECK(e.isOfType<ProtocolError>());
  }
  std::string longer = body + "z";
  MessageFrame out;
  CHECK(decode(bytes(longer), longer.size(), Limits(), out).isOfType<ProtocolError>());
}

TEST_CASE("limits are checked before anything is allocated") {
  Limits limits;
  limits.maxTensorSize = 100;
  MessageFrame out;
  std::string body = encode(sample());
  CHECK(decode(bytes(body), body.size(), limits, out).isOfType<LimitExceededError>());
  limits = Limits();
  limits.maxMessageSize = 1000;
  CHECK(decode(bytes(body), body.size(), limits, out).isOfType<LimitExceededError>());
  // A count far beyond what the bytes could hold is refused, not reserved.
  std::string bogus = std::string(4, '\0') + std::string("\xff\xff\xff\x7f", 4);
  CHECK(decode(bytes(bogus), bogus.size(), Limits(), out).isOfType<ProtocolError>());
}

TEST_CASE("headers: magic, version, type and length are checked") {
  std::string h = encodeHeader(FrameType::kMessage, 100);
  FrameHeader out;
  REQUIRE(!decodeHeader(bytes(h), Limits(), out));
  CHECK(out.length == 100);
  Limits small;
  small.maxFrameSize = 99;
  CHECK(decodeHeader(bytes(h), small, out).isOfType<LimitExceededError>());
  std::string bad = h;
  bad[0] = 'X';
  CHECK(decodeHeader(bytes(bad), Limits(), out).isOfType<ProtocolError>());
  bad = h;
  bad[2] = 2;
  CHECK(decodeHeader(bytes(bad), Limits(), out).what().find("version") != std::string::npos);
  bad = h;
  bad[3] = 42;
  CHECK(decodeHeader(bytes(bad), Limits(), out).isOfType<ProtocolError>());
}
