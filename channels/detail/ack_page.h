#pragma once
// A page shared with the peer process, both ends: cuda_ipc's acknowledgement
// page and cma's assist page (cma_assist.h). The sender makes a sealed
// one-page memfd and names it to the receiver by its fd number; the receiver
// duplicates that fd of the peer process through a pidfd (pidfd_getfd;
// where it is missing or refused, as under Yama's ptrace_scope 1, opened
// through /proc, non-blocking) — a name the peer
// wrote, so it is hostile: nothing is opened (a FUSE file or a device could
// block an open, or act on it), the page is taken only in the process the kernel names
// at the other end of the pipe (`peer`, from SO_PEERCRED), only if that
// process runs as our user, only while a pidfd taken first says it lives,
// and only if the fd is a regular file of exactly one page sealed against
// shrinking (nothing can cut it away under our mapping: no SIGBUS). A peer
// can make us write 8 bytes into a page of its own, nothing else. No CUDA
// here: tests/cuda/cuda_channels_test attacks it on any machine.
#include <cstddef>
#include <cstdint>
#include <optional>

#include <actorpipe/runtime/detail/peer_process.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::channel::detail {

constexpr size_t kAckPageSize = 4096;

// Sender: a sealed page, mapped read-write; `fd` stays open while the peer
// may still open it.
// `purpose` names the page in errors (and the memfd).
Error makeAckPage(int& fd, void*& page, const char* purpose = "cuda_ipc");

// Receiver: maps the page the peer names as its fd `fd`. On success `page`
// is mapped (kAckPageSize bytes) and `pidfd` watches the peer.
Error mapPeerAckPage(const std::optional<actorpipe::detail::PeerProcess>& peer, uint64_t fd, void*& page,
                     int& pidfd, const char* purpose = "cuda_ipc");

} // namespace actorpipe::channel::detail
