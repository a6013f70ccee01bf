#pragma once
// actorpipe's wire format, version 1. Every frame starts with an 8-byte
// header: 'A' 'P', the version, the frame type, and the body's length (u32,
// little endian). Integers are little endian, strings are a u32 length and
// bytes. A reader checks every length against the remaining bytes and the
// configured Limits before it allocates anything, so a malformed or hostile
// frame yields a ProtocolError / LimitExceededError, never a crash.
//
// A MESSAGE frame carries a descriptor; the bytes of its payloads, then those
// of its inline tensors, follow the frame on the stream, in order.
#include <cstdint>
#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/options.h>

namespace actorpipe::wire {

constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 8;

enum class FrameType : uint8_t {
  kHello = 1,    // connector -> acceptor: who I am, what I offer
  kWelcome = 2,  // acceptor -> connector: what we use
  kReject = 3,   // acceptor -> connector: why we cannot talk
  kMessage = 4,  // either way: a descriptor, then its data
  kJoin = 5,     // connector -> acceptor, on a second transport: "I am that pipe"
  kChallenge = 6,  // either way, when a secret is set: a nonce (and, from the acceptor, its proof)
  kAuth = 7,       // connector -> acceptor: its proof
};

struct FrameHeader {
  FrameType type;
  uint32_t length;
};

std::string encodeHeader(FrameType type, size_t bodyLength);
// Validates magic, version, type and length against limits.maxFrameSize.
Error decodeHeader(const uint8_t* bytes, const Limits& limits, FrameHeader& out);

struct Offer {
  std::string name;
  int64_t priority{0};
  std::string domainDescriptor;
  std::vector<std::string> deviceTypes;  // channels only
  std::string detail;                    // channels only: see channel::Context::helloDetail
};

struct Hello {
  std::string contextName;
  std::vector<Offer> transports;
  std::vector<Offer> channels;
};

struct Welcome {
  std::string contextName;
  std::string transport;
  // device type -> channel name
  std::vector<std::pair<std::string, std::string>> channels;
  // channel name -> what its connecting endpoint needs (out-of-band channels)
  std::vector<std::pair<std::string, std::string>> setups;
  // When `transport` is not the one this connection runs on: where to
  // connect instead, and the token that the JOIN frame must present there.
  std::string address;
  uint64_t joinToken{0};
  // Why the acceptor chose what it chose, for PipeInfo.
  std::vector<std::string> notes;
};

struct Join {
  uint64_t token{0};
};

struct Challenge {
  std::string nonce;
  std::string mac;  // empty from the connector
};

struct Auth {
  std::string mac;
};

struct Reject {
  std::string reason;
  enum Kind : uint8_t { kNegotiation = 0, kAuthentication = 1 } kind{kNegotiation};
};

// How a tensor travels: which channel, whether its bytes follow inline in
// the stream, and what the channel needs to fetch them otherwise.
struct TensorRoute {
  std::string channel;
  bool inlineData{true};
  std::string channelDescriptor;
};

struct MessageFrame {
  Descriptor descriptor;
  std::vector<TensorRoute> routes;  // one per tensor
};

std::string encode(const Hello& hello);
std::string encode(const Welcome& welcome);
std::string encode(const Reject& reject);
std::string encode(const MessageFrame& frame);
// The same frame with its header in front, built in one string: what a
// pipe sends (one allocation for a small message, not three).
std::string encodeMessage(const MessageFrame& frame);
// The same into `out`, reusing its memory.
void encodeMessage(const MessageFrame& frame, std::string& out);
std::string encode(const Join& join);
std::string encode(const Challenge& challenge);
std::string encode(const Auth& auth);

Error decode(const uint8_t* body, size_t length, const Limits& limits, Hello& out);
Error decode(const uint8_t* body, size_t length, const Limits& limits, Welcome& out);
Error decode(const uint8_t* body, size_t length, const Limits& limits, Reject& out);
Error decode(const uint8_t* body, size_t length, const Limits& limits, Join& out);
Error decode(const uint8_t* body, size_t length, const Limits& limits, Challenge& out);
Error decode(const uint8_t* body, size_t length, const Limits& limits, Auth& out);
// Also checks every payload and tensor length, and their sum, against limits.
Error decode(const uint8_t* body, size_t length, const Limits& limits, MessageFrame& out);

} // namespace actorpipe::wire
