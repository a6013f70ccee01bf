#include <actorpipe/actors/backends.h>

#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/cma/factory.h>
#include <actorpipe/channels/cuda_basic/factory.h>
#include <actorpipe/channels/cuda_ipc/factory.h>
#include <actorpipe/channels/cuda_xth/factory.h>
#include <actorpipe/channels/mpt/factory.h>
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

namespace actorpipe {

void registerDefaultBackends(Context& context, const DefaultBackends& which) {
  context.registerTransport(0, "tcp", transport::uv::create());
  if (which.shm) context.registerTransport(10, "shm", transport::shm::create());
  context.registerChannel(0, "basic", channel::basic::create());
  // Offered to every peer; one process picks xth, same-host pairs basic (or
  // cma, when registered), pairs on different hosts mpt.
  if (which.mptLanes > 0) context.registerChannel(5, "mpt", channel::mpt::create(which.mptLanes, which.mptHost));
  if (which.cma.value_or(which.mptLanes > 0 && which.shm)) {
    context.registerChannel(10, "cma", channel::cma::create());
  }
  if (which.xth) context.registerChannel(20, "xth", channel::xth::create());
  if (which.cuda) {
    context.registerChannel(0, "cuda_basic", channel::cuda_basic::create());
    context.registerChannel(10, "cuda_ipc", channel::cuda_ipc::create());
    context.registerChannel(20, "cuda_xth", channel::cuda_xth::create());
  }
}

}  // namespace actorpipe
