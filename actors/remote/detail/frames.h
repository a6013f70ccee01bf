#pragma once
// The frames two nodes exchange, each the metadata of one pipe message.
//
//   HELLO    identity, pid, window,   first frame each way, once; `node`
//            node, urls               is the sender's CAF node id, as CAF
//                                     serializes it (its actors' handles
//                                     name it; our proxies of them too);
//                                     `urls` where it listens
//   LOOKUP   request, name            which actor is published as `name`?
//   FOUND    request, aid, interface  0 = nothing under that name
//   MESSAGE  source aid, target aid, message id   + 1 payload (CAF bytes)
//                                                 + the message's tensors
//   INLINE   source aid, target aid, message id,  a MESSAGE whose CAF bytes
//            bytes                                (at most kMaxInlineBytes)
//                                                 ride in the frame: no
//                                                 payload, no tensors. Most
//                                                 actor messages are small,
//                                                 and a batch of INLINEs and
//                                                 control frames is handled
//                                                 as its descriptor arrives
//                                                 (the pipe's read has
//                                                 nothing to bring)
//   DOWN     aid, reason              an actor the peer may hold is gone
//   BEAT                              nothing else was sent for a while
//   BYE                               the node leaves on purpose: its
//                                     last frame; the reader closes the
//                                     pipe, then the leaver does
//   CREDIT   messages, bytes          that many of the peer's MESSAGEs are
//                                     done with here (see Link, "window")
//   LINK     source aid, target aid   the sender's actor `source` linked
//   UNLINK   source aid, target aid   itself to (unlinked itself from) the
//                                     receiver's actor `target`; the
//                                     source's end comes as a DOWN
//   WATCH    aid                      a message brought the sender a handle
//                                     of the receiver's actor `aid`: the
//                                     receiver says its DOWN when it ends
//                                     (at once if it is gone)
//   WHERE    request, node            a message brought a handle of node
//                                     `node`'s actor, and the asker has no
//                                     link to that node: where does it
//                                     listen?
//   AT       request, urls            where it said it listens (its HELLO);
//                                     none if the answerer has no link
//
// A frame is a version byte, a kind byte and its fields (runtime/detail/
// codec.h). A pipe message carries a batch of frames in its metadata: a
// count, then each frame with the number of the message's tensors it owns;
// each MESSAGE frame owns the next payload, in order. A sender writes
// whatever queued up while its previous pipe write was in flight as one
// batch, so a busy link pays the pipe's per-message cost once per batch. Decoding is strict: known kind, printable bounded names, no
// trailing bytes, message ids of the two one-to-one categories only (CAF's
// stream categories are not for peers to inject).
#include <cstdint>
#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>

namespace actorpipe::remote::detail {

// 2: INLINE; 3: HELLO's urls, WHERE and AT (a peer of another version is
// refused at its HELLO).
constexpr uint8_t kFrameVersion = 3;
constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxIdentityLength = 255;
constexpr size_t kMaxNodeIdLength = 128;
constexpr size_t kMaxReasonLength = 4096;
constexpr size_t kMaxInterfaceEntries = 1024;
constexpr size_t kMaxInterfaceEntryLength = 4096;
constexpr size_t kMaxBatchFrames = 1024;
constexpr size_t kMaxInlineBytes = 1024;
constexpr size_t kMaxUrls = 8;
constexpr size_t kMaxUrlLength = 255;

struct Frame {
  enum class Kind : uint8_t {
    kHello = 1,
    kLookup = 2,
    kFound = 3,
    kMessage = 4,
    kDown = 5,
    kBeat = 6,
    kBye = 7,
    kCredit = 8,
    kLink = 9,
    kUnlink = 10,
    kWatch = 11,
    kInline = 12,
    kWhere = 13,
    kAt = 14,
  };
  Kind kind{Kind::kBeat};
  // kHello
  std::string identity;
  uint32_t pid{0};
  std::string node;  // and kWhere
  std::vector<std::string> urls;  // kHello, kAt
  // kHello: the sender's window (its receiver credits a quarter at a time);
  // kCredit: what is credited
  uint64_t messages{0};
  uint64_t bytes{0};
  // kLookup, kFound, kWhere, kAt
  uint64_t request{0};
  std::string name;
  std::vector<std::string> interface;
  // kFound, kMessage and kInline (target), kDown, kLink and kUnlink
  // (target), kWatch
  uint64_t aid{0};
  // kMessage, kInline, kLink, kUnlink
  uint64_t source{0};
  uint64_t messageId{0};
  // kInline: the message's CAF bytes
  std::string body;
  // kDown: the actor's exit reason as CAF has it
  uint8_t code{0};
  uint64_t category{0};
  std::string reason;
};

std::string encodeFrame(const Frame& frame);
// An INLINE frame of `frame`'s source, target and message id with these
// bytes (encodeFrame's, without copying them into a Frame first).
std::string encodeInlineFrame(const Frame& frame, const char* bytes, size_t size);
Error decodeFrame(const std::string& bytes, Frame& frame);
Error decodeFrame(const uint8_t* bytes, size_t size, Frame& frame);

struct BatchEntry {
  Frame frame;
  uint32_t tensors{0};  // a MESSAGE's; 0 for every other kind
};
// `frames`: encoded frames and their tensor counts.
std::string encodeBatch(const std::vector<std::pair<std::string, uint32_t>>& frames);
// 1..kMaxBatchFrames frames, each decoded strictly; tensors only on MESSAGEs.
Error decodeBatch(const std::string& bytes, std::vector<BatchEntry>& entries);

// Printable ASCII without spaces, 1..limit bytes.
bool isPlainName(const std::string& text, size_t limit);

} // namespace actorpipe::remote::detail
