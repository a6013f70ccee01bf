#pragma once
// What a group's ranks say to each other on their links: one frame in the
// metadata of each pipe message, encoded with the pipe's own codec
// (runtime/detail/codec.h): every field bounded, the first failure sticks, a
// kind or an abort cause we do not know is a ProtocolError. Another rank
// is a peer like any other; nothing it sends is trusted for more than what
// it says (a rank number is checked against the links we have).
//
//   introduce  role, rank            the first message on a link: which rank,
//                                    and which link (tree, ring, doubling)
//   refuse     reason                the link's acceptor will not have it
//   data       collective, index,    one chunk of a collective; its tensors
//              contributors          are the message's tensors
//   abort      collective, rank,     a collective failed: why, told once by
//              cause, reason         each rank to its neighbours
//   bye        -                     the rank closes its Tree on purpose
#include <cstdint>
#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

struct Member {
  std::string host;
  std::string url;  // where this rank accepts tree links
};

struct LinkFrame {
  enum class Kind : uint8_t { kIntroduce = 1, kRefuse = 2, kData = 3, kAbort = 4, kBye = 5 };
  // kClient: a client's first message to its server (rank 0), and the
  // server's answer (rank: the id it gives the client).
  enum class Role : uint8_t { kTree = 1, kRing = 2, kCube = 3, kClient = 4 };
  // Why a collective failed: the error kind every rank raises for it
  // (kOther: a kind that does not travel; its text does).
  enum class Cause : uint8_t { kRankFailed = 1, kLogic = 2, kTimeout = 3, kProtocol = 4, kOther = 5 };

  Kind kind{Kind::kBye};
  Role role{Role::kTree};        // introduce
  int32_t rank{-1};              // introduce; abort: the failed rank (-1: none)
  uint64_t collective{0};        // data, abort
  uint64_t index{0};             // data: chunk, or step * chunks + chunk
  int32_t contributors{0};       // data
  Cause cause{Cause::kTimeout};  // abort
  std::string reason;            // refuse, abort

  static LinkFrame introduce(Role role, int rank);
  static LinkFrame refuse(std::string reason);
  static LinkFrame data(uint64_t collective, uint64_t index, int contributors);
  static LinkFrame abort(uint64_t collective, Cause cause, int rank, std::string reason);
  static LinkFrame bye();

  // "data of collective #3, index 2, 1 contributor(s)": for error messages.
  std::string describe() const;
};

// A reason longer than this is cut when encoded and refused when decoded.
constexpr size_t kMaxLinkFrameReason = 4096;

std::string encode(const LinkFrame& frame);
Error decode(const std::string& bytes, LinkFrame& out);

// An error as an abort frame, and an abort frame as the error every rank
// raises for it: a rank failure, a misuse, a timeout and a peer's garbage
// travel as their own kinds; any other kind as an AbortedError with its text.
LinkFrame abortFrame(uint64_t collective, const Error& error);
Error abortError(const LinkFrame& frame);

// What ranks and rank 0 say while the group forms (rendezvous.h), the same
// way, on the pipe to rank 0's rendezvous address:
//
//   hello    rank, world size, host, url     a rank checks in
//   table    (host, url) per rank            rank 0's answer once every rank came
//   failure  reason                          rank 0's answer when the group cannot form
//
// Hosts and URLs are printable ASCII without spaces, 1 to kMaxHostBytes /
// kMaxUrlBytes long; a world size is 1 to kMaxWorldSize, a rank below it.
struct RendezvousFrame {
  enum class Kind : uint8_t { kHello = 11, kTable = 12, kFailure = 13 };

  Kind kind{Kind::kFailure};
  int32_t rank{-1};      // hello
  int32_t worldSize{0};  // hello
  Member member;         // hello: the sender's host and url
  std::vector<Member> table;
  std::string reason;    // failure

  static RendezvousFrame hello(int rank, int worldSize, Member member);
  static RendezvousFrame tableOf(std::vector<Member> members);
  static RendezvousFrame failure(std::string reason);
};

constexpr size_t kMaxHostBytes = 255;
constexpr size_t kMaxUrlBytes = 1024;
constexpr int32_t kMaxWorldSize = 1 << 20;

std::string encode(const RendezvousFrame& frame);
Error decode(const std::string& bytes, RendezvousFrame& out);

}  // namespace actorpipe::group
