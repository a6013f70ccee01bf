#pragma once
// Errors travel by value through callbacks. An empty Error means success;
// `isOfType<T>()` tells the kinds apart, `what()` explains in words.
#include <sys/types.h>

#include <memory>
#include <string>

#include <actorpipe/runtime/fwd.h>

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

class BaseError {
 public:
  virtual ~BaseError() = default;
  virtual std::string what() const = 0;
};

class Error final {
 public:
  Error() = default;
  Error(std::shared_ptr<BaseError> error, std::string file, int line)
      : error_(std::move(error)), file_(std::move(file)), line_(line) {}

  static const Error kSuccess;

  // Implicit, as in TensorPipe: `if (error)`, and code ported from it that
  // returns or stores an Error as a bool, compile unchanged.
  operator bool() const { return static_cast<bool>(error_); }

  template <typename T>
  std::shared_ptr<T> castToType() const {
    return std::dynamic_pointer_cast<T>(error_);
  }
  template <typename T>
  bool isOfType() const {
    return castToType<T>() != nullptr;
  }

  // The cause, then where it was raised: "... (raised at runtime/pipe_core.cc:120)".
  std::string what() const;

 private:
  std::shared_ptr<BaseError> error_;
  std::string file_;
  int line_{0};
};

}  // namespace tensorpipe

namespace actorpipe {

#define ACTORPIPE_ERROR(type, ...) \
  ::actorpipe::Error(std::make_shared<type>(__VA_ARGS__), __FILE__, __LINE__)
// TensorPipe's spelling, for code ported from it.
#define TP_CREATE_ERROR(type, ...) ACTORPIPE_ERROR(type, __VA_ARGS__)

// A call that breaks the API's contract (read() with no descriptor pending,
// an allocation that does not match its descriptor, ...).
class LogicError final : public BaseError {
 public:
  explicit LogicError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "logic error: " + reason_; }
  const std::string& reason() const { return reason_; }
 private:
  std::string reason_;
};

class ContextClosedError final : public BaseError {
 public:
  std::string what() const override { return "context closed"; }
};

class ListenerClosedError final : public BaseError {
 public:
  std::string what() const override { return "listener closed"; }
};

class PipeClosedError final : public BaseError {
 public:
  std::string what() const override { return "pipe closed"; }
};

// The peer closed its end in an orderly way (or died and the kernel did it).
class EOFError final : public BaseError {
 public:
  std::string what() const override { return "eof: the peer closed the connection"; }
};

// A connection or a channel this side closed (TensorPipe's names; the pipe
// reports its own close as PipeClosedError).
class ConnectionClosedError final : public BaseError {
 public:
  std::string what() const override { return "connection closed"; }
};
class ChannelClosedError final : public BaseError {
 public:
  std::string what() const override { return "channel closed"; }
};

// A backend that cannot work on this host (TensorPipe's name). actorpipe's
// Context skips such backends when it negotiates instead of failing with it.
class ContextNotViableError final : public BaseError {
 public:
  std::string what() const override { return "context not viable"; }
};

// TensorPipe's kinds for a read or write that moved fewer bytes than asked.
// actorpipe's transports retry partial transfers, so these are never raised
// here; they exist so that TensorPipe users' isOfType checks compile.
class ShortReadError final : public BaseError {
 public:
  ShortReadError(ssize_t expected, ssize_t actual) : expected_(expected), actual_(actual) {}
  std::string what() const override {
    return "short read: got " + std::to_string(actual_) + " bytes while expecting to read " +
           std::to_string(expected_) + " bytes";
  }
 private:
  ssize_t expected_;
  ssize_t actual_;
};
class ShortWriteError final : public BaseError {
 public:
  ShortWriteError(ssize_t expected, ssize_t actual) : expected_(expected), actual_(actual) {}
  std::string what() const override {
    return "short write: wrote " + std::to_string(actual_) + " bytes while expecting to write " +
           std::to_string(expected_) + " bytes";
  }
 private:
  ssize_t expected_;
  ssize_t actual_;
};

// A system call failed; `errorCode()` is its errno. Not final: a backend's
// own kind of system error (uv's UVError) is still a SystemError.
class SystemError : public BaseError {
 public:
  SystemError(std::string syscall, int error) : syscall_(std::move(syscall)), error_(error) {}
  std::string what() const override;
  int errorCode() const { return error_; }
 private:
  std::string syscall_;
  int error_;
};

// Reaching a peer failed: names the address and the cause.
class ConnectError final : public BaseError {
 public:
  ConnectError(std::string address, std::string cause, int error = 0)
      : address_(std::move(address)), cause_(std::move(cause)), error_(error) {}
  std::string what() const override { return "connect to " + address_ + " failed: " + cause_; }
  const std::string& address() const { return address_; }
  int errorCode() const { return error_; }
 private:
  std::string address_;
  std::string cause_;
  int error_;
};

// The peer sent bytes that are not a valid frame of our wire format.
class ProtocolError final : public BaseError {
 public:
  explicit ProtocolError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "protocol error: " + reason_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// A length announced by the peer (or asked of us) is above a configured limit.
class LimitExceededError final : public BaseError {
 public:
  LimitExceededError(std::string what, size_t value, size_t limit)
      : what_(std::move(what)), value_(value), limit_(limit) {}
  std::string what() const override {
    return what_ + " of " + std::to_string(value_) + " bytes exceeds the limit of " +
           std::to_string(limit_);
  }
 private:
  std::string what_;
  size_t value_;
  size_t limit_;
};

// The two peers share no transport or no channel for some device.
class NegotiationError final : public BaseError {
 public:
  explicit NegotiationError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "negotiation failed: " + reason_; }
 private:
  std::string reason_;
};

// A URL names a scheme no transport was registered under.
class UnknownTransportError final : public BaseError {
 public:
  explicit UnknownTransportError(std::string url) : url_(std::move(url)) {}
  std::string what() const override;
 private:
  std::string url_;
};

// Something did not happen in time: a handshake, or an operation past the
// deadline set in ContextOptions / PipeOptions.
class TimeoutError final : public BaseError {
 public:
  TimeoutError(std::string what, long long milliseconds)
      : reason_(what + " did not complete within " + std::to_string(milliseconds) + " ms") {}
  explicit TimeoutError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "timeout: " + reason_; }
  // What ran out of time, without the "timeout: " in front.
  const std::string& reason() const { return reason_; }
 private:
  std::string reason_;
};

// The peers do not share the Context's secret (or one side has none).
class AuthenticationError final : public BaseError {
 public:
  explicit AuthenticationError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "authentication failed: " + reason_; }
 private:
  std::string reason_;
};

// A supervised transport or channel actor went down; its pipes fail with this.
class BackendDownError final : public BaseError {
 public:
  BackendDownError(std::string backend, std::string reason)
      : backend_(std::move(backend)), reason_(std::move(reason)) {}
  std::string what() const override { return backend_ + " went down: " + reason_; }
 private:
  std::string backend_;
  std::string reason_;
};

// A CUDA runtime call failed (or CUDA is not there: no support compiled
// in, no driver, no device). `code()` is the cudaError_t value, 0 where no
// call was made.
class CudaError final : public BaseError {
 public:
  CudaError(std::string call, std::string reason, int code = 0)
      : call_(std::move(call)), reason_(std::move(reason)), code_(code) {}
  std::string what() const override {
    return call_ + ": " + reason_ + (code_ != 0 ? " (cudaError " + std::to_string(code_) + ")" : "");
  }
  int code() const { return code_; }
 private:
  std::string call_;
  std::string reason_;
  int code_;
};

} // namespace actorpipe
