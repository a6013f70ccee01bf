#pragma once
// The process at the other end of a connection as the kernel tells it (a
// Unix socket's SO_PEERCRED), never as the peer says. A channel that reaches
// into its peer's memory (cma) acts on this identity only: a pid or uid read
// from the wire would let a peer point us at a third process.
#include <sys/types.h>

#include <functional>
#include <optional>

namespace actorpipe::detail {

struct PeerProcess {
  pid_t pid;
  uid_t uid;
};

// Asked when needed (the connection may not be connected yet when the
// pipe's channels are set up); empty where the transport cannot know (tcp).
using PeerProcessLookup = std::function<std::optional<PeerProcess>()>;

} // namespace actorpipe::detail
