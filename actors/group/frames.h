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

#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

struct LinkFrame {
  enum class Kind : uint8_t { kIntroduce = 1, kRefuse = 2, kData = 3, kAbort = 4, kBye = 5 };
  enum class Role : uint8_t { kTree = 1, kRing = 2, kCube = 3 };
  // Why a collective failed: the error kind every rank raises for it.
  enum class Cause : uint8_t { kRankFailed = 1, kLogic = 2, kTimeout = 3 };

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

}  // namespace actorpipe::group
