#pragma once
// The uv transport's error kinds, under TensorPipe's names.
#include <string>

#include <actorpipe/transports/context.h>

namespace actorpipe::transport::uv {

// A libuv call failed. Still a SystemError: errorCode() is the errno that
// libuv's (negative) status stands for.
class UVError final : public SystemError {
 public:
  // TensorPipe's constructor: libuv's status alone.
  explicit UVError(int status) : SystemError("libuv", -status) {}
  UVError(std::string call, int status) : SystemError(std::move(call), -status) {}
};

using NoAddrFoundError = transport::NoAddrFoundError;

} // namespace actorpipe::transport::uv
