#pragma once
// The cma channel ("cross-memory attach"): both ends on one host. The
// receiver reads the sender's tensor straight into its allocation with
// process_vm_readv: one copy, through no buffer.
//
// Offered only where it works: same boot, same user, same user and pid
// namespaces, the process dumpable, process_vm_readv not blocked (probed on
// ourselves at creation) and a Yama ptrace scope of 0, over a transport that
// can tell which process the peer is (shm: the kernel's SO_PEERCRED); the
// accepting side probes the connecting side's memory during the handshake.
// Otherwise peers fall back to the next channel (basic). Whatever the peer
// claims, we read and write only the memory of the process the kernel names,
// and only if it runs as our user (pull_endpoint.h).
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::cma {

std::shared_ptr<Context> create();

} // namespace actorpipe::channel::cma
