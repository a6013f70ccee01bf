#pragma once
// The rest of TensorPipe's names in namespace tensorpipe. Its classes are
// defined there already (runtime/fwd.h says why); here its other top-level
// names are declared into it one by one, and its transport:: and channel::
// namespaces see actorpipe's (uv, shm, ibv, basic, xth, cma, mpt, cuda_xth,
// cuda_ipc, cuda_basic, their create() and errors). Not `using namespace actorpipe` at the top level: with
// `using namespace tensorpipe;` in a user's file, `transport::uv::create()`
// would then be ambiguous between tensorpipe::transport and
// actorpipe::transport.
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/optional.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe::transport {}
namespace actorpipe::channel {}

namespace tensorpipe {
using ::actorpipe::kCpuDeviceType;
using ::actorpipe::kCudaDeviceType;
using ::actorpipe::nullopt;
using ::actorpipe::optional;

using ::actorpipe::ContextClosedError;
using ::actorpipe::EOFError;
using ::actorpipe::ListenerClosedError;
using ::actorpipe::LogicError;
using ::actorpipe::PipeClosedError;
using ::actorpipe::ShortReadError;
using ::actorpipe::ShortWriteError;
using ::actorpipe::SystemError;
using ::actorpipe::CudaError;

namespace transport {
using namespace ::actorpipe::transport;
}  // namespace transport
namespace channel {
using namespace ::actorpipe::channel;
}  // namespace channel
}  // namespace tensorpipe
