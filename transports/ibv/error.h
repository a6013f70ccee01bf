#pragma once
// The ibv transport's error kinds, under TensorPipe's names.
#include <netdb.h>

#include <string>

#include <actorpipe/transports/context.h>

namespace actorpipe::transport::ibv {

// A work completion came back with an error status (the status, in words).
class IbvError final : public BaseError {
 public:
  explicit IbvError(std::string error) : error_(std::move(error)) {}
  std::string what() const override { return "ibv: " + error_; }
 private:
  std::string error_;
};

// The host's name did not resolve (lookupAddrForHostname).
class GetaddrinfoError final : public BaseError {
 public:
  explicit GetaddrinfoError(int error) : error_(error) {}
  std::string what() const override { return std::string("getaddrinfo: ") + ::gai_strerror(error_); }
 private:
  int error_;
};

using NoAddrFoundError = transport::NoAddrFoundError;

} // namespace actorpipe::transport::ibv
