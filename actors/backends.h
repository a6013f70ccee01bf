#pragma once
// The backends every build of actorpipe has, registered under their usual
// names and priorities in one place (the demo, the groups, the mailboxes and
// the tests' harness all start from it). Higher priority wins when both
// peers registered a backend; docs/architecture.md, "Negotiation".
//
//   transports: tcp 0, shm 10          channels: basic 0, mpt 5, cma 10, xth 20
//                                      CUDA channels: cuda_basic 0, cuda_ipc 10,
//                                      cuda_xth 20
//
// The CUDA channels are registered in every build; they are offered only
// where actorpipe was built with CUDA and a device is there (docs/cuda.md).
//
// ibv is not among them: it needs an RDMA device (register it by hand where
// one exists; its isViable() says whether it works here).
#include <cstddef>
#include <memory>
#include <string>

#include <actorpipe/runtime/context.h>

namespace actorpipe {

struct DefaultBackends {
  bool shm{true};
  bool cma{true};
  bool xth{true};
  bool cuda{true};  // cuda_basic, cuda_ipc and cuda_xth
  // mpt's lanes (TCP connections per pipe) and the address its lanes listen
  // on; 0 lanes leaves mpt out.
  size_t mptLanes{0};
  std::string mptHost{"127.0.0.1"};
};

void registerDefaultBackends(Context& context, const DefaultBackends& which = DefaultBackends());

}  // namespace actorpipe
