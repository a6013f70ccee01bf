#pragma once
// The backends every build of actorpipe has, registered under their usual
// names and priorities in one place (the demo, the groups, the mailboxes and
// the tests' harness all start from it). Higher priority wins when both
// peers registered a backend; docs/architecture.md, "Negotiation".
//
//   transports: tcp 0, shm 10          channels: basic 0, mpt 5, cma 10 (when
//                                      asked for), xth 20
//                                      CUDA channels: cuda_basic 0, cuda_ipc 10,
//                                      cuda_xth 20
//
// cma is left out unless asked for, or unless mpt lanes are configured.
// It is only ever chosen over shm (it needs the kernel's word on the
// peer's pid), and over shm basic moves large tensors faster: the sender
// copies into the ring while the receiver copies out, each on its own CPU,
// 64 KiB behind (shm/ring.h), against cma's one kernel copy
// (docs/benchmarks.md, 2026-11-27: on two free CPUs 64 KiB 8 against 28
// µs, 64 MiB 7.6-8.6 against 15.5-15.7 ms a round trip; with both CPUs
// shared with a busy loop 64 MiB 16 against 27 ms, but 1 MiB 0.87 against
// 0.69 ms). cma costs half the CPU time and no ring space, and needs
// ptrace permission over the peer: ask for it where CPU time is scarcer
// than latency. With mpt lanes it is on unless set to false: the
// negotiation goes by priorities alone, and mpt (5) would otherwise beat
// basic (0) between processes of one host, over loopback TCP lanes.
//
// The CUDA channels are registered in every build; they are offered only
// where actorpipe was built with CUDA and a device is there (docs/cuda.md).
//
// ibv is not among them: it needs an RDMA device (register it by hand where
// one exists; its isViable() says whether it works here).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include <actorpipe/runtime/context.h>

namespace actorpipe {

struct DefaultBackends {
  bool shm{true};
  std::optional<bool> cma;  // unset: on with mpt lanes only (see above)
  bool xth{true};
  bool cuda{true};  // cuda_basic, cuda_ipc and cuda_xth
  // mpt's lanes (TCP connections per pipe) and the address its lanes listen
  // on; 0 lanes leaves mpt out.
  size_t mptLanes{0};
  std::string mptHost{"127.0.0.1"};
};

void registerDefaultBackends(Context& context, const DefaultBackends& which = DefaultBackends());

}  // namespace actorpipe
