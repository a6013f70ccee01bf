#pragma once
// The cma channel ("cross-memory attach"): both ends on one host. The
// receiver reads the sender's tensor straight into its allocation with
// process_vm_readv: one copy, through no buffer.
//
// Offered only where it works: same boot, same user, same user and pid
// namespaces, the process dumpable, process_vm_readv not blocked (probed on
// ourselves at creation) and a Yama ptrace scope of 0; and the accepting
// side probes the connecting side's memory during the handshake. Otherwise
// peers fall back to the next channel (basic).
#include <memory>

#include <actorpipe/channels/context.h>

namespace actorpipe::channel::cma {

std::shared_ptr<Context> create();

} // namespace actorpipe::channel::cma
