#pragma once
// The classes of TensorPipe's API are *defined* in namespace tensorpipe and
// named in actorpipe by using-declarations: one type, two names. Code written
// for TensorPipe forward-declares them (`namespace tensorpipe { class Pipe; }`,
// as PyTorch's RPC agent does), which only works if `tensorpipe` is a real
// namespace that holds the definitions; a namespace alias would reject it.
// Everything else of actorpipe lives in actorpipe alone; the compatibility
// header (compat/tensorpipe/detail/namespace.h) adds the rest of TensorPipe's
// names to namespace tensorpipe.
//
// So, in actorpipe's own code, forward-declare these through this header,
// never as `namespace actorpipe { class Pipe; }` (that would be a second,
// different class, and the compiler says so).
namespace tensorpipe {
class Allocation;
class BaseError;
class Buffer;
class Context;
class ContextOptions;
struct CpuBuffer;
struct CudaBuffer;
class Descriptor;
struct Device;
class Error;
class Listener;
class Message;
class Pipe;
class PipeOptions;
namespace transport {
class Context;
}  // namespace transport
namespace channel {
class Context;
}  // namespace channel
}  // namespace tensorpipe

namespace actorpipe {
using ::tensorpipe::Allocation;
using ::tensorpipe::BaseError;
using ::tensorpipe::Buffer;
using ::tensorpipe::Context;
using ::tensorpipe::ContextOptions;
using ::tensorpipe::CpuBuffer;
using ::tensorpipe::CudaBuffer;
using ::tensorpipe::Descriptor;
using ::tensorpipe::Device;
using ::tensorpipe::Error;
using ::tensorpipe::Listener;
using ::tensorpipe::Message;
using ::tensorpipe::Pipe;
using ::tensorpipe::PipeOptions;
namespace transport {
using ::tensorpipe::transport::Context;
}  // namespace transport
namespace channel {
using ::tensorpipe::channel::Context;
}  // namespace channel
}  // namespace actorpipe
