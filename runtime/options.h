#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <actorpipe/runtime/fwd.h>

namespace caf {
class actor_system;
}

namespace actorpipe {

// Bounds checked against every length a peer announces, before anything is
// allocated or read. Defaults are generous for tensors (the reader allocates
// those itself) and tight for what actorpipe allocates (frame bodies).
struct Limits {
  size_t maxFrameSize{64u << 20};          // handshake and descriptor frames
  size_t maxPayloadSize{size_t{16} << 30};  // one payload
  size_t maxTensorSize{size_t{64} << 30};   // one tensor
  size_t maxMessageSize{size_t{256} << 30}; // all payloads and tensors of a message
  size_t maxEntries{1u << 20};              // payloads + tensors of a message
  size_t maxPendingOperations{1u << 16};    // per pipe, of each kind (write, readDescriptor, read)
  size_t maxPendingPipes{1024};             // per listener: handshaking or waiting for accept()
};

}  // namespace actorpipe

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

class ContextOptions {
 public:
  // Sent to peers during the handshake; what their Pipe::getRemoteName() says.
  ContextOptions& name(std::string name) {
    name_ = std::move(name);
    return *this;
  }
  // Run the Context's actors in an existing actor system instead of its own.
  // The system must outlive the Context.
  ContextOptions& actorSystem(caf::actor_system& system) {
    system_ = &system;
    return *this;
  }
  ContextOptions& limits(::actorpipe::Limits limits) {
    limits_ = limits;
    return *this;
  }
  // How long an event loop keeps polling after its last event before it goes
  // to sleep in the kernel. Waking a sleeping thread costs ~40 µs on the VMs
  // we measure on, so a busy pipe stays awake; an idle one costs nothing once
  // the window has passed. Zero disables polling.
  ContextOptions& pollWindow(std::chrono::microseconds window) {
    pollWindow_ = window;
    return *this;
  }
  // A shared secret: peers prove they know it (HMAC-SHA256 challenge and
  // response) before anything else is processed; a peer without it is
  // refused. Both ends of a pipe need the same secret. Nothing is encrypted.
  ContextOptions& secret(std::string secret) {
    secret_ = std::move(secret);
    return *this;
  }
  // A pipe whose handshake (and a connection's first frame) takes longer
  // fails with a TimeoutError. TensorPipe waits forever.
  ContextOptions& handshakeTimeout(std::chrono::milliseconds timeout) {
    handshakeTimeout_ = timeout;
    return *this;
  }
  // If set, an operation (write, readDescriptor, read) still pending after
  // this long fails its pipe with a TimeoutError that names it. Zero: never.
  ContextOptions& operationTimeout(std::chrono::milliseconds timeout) {
    operationTimeout_ = timeout;
    return *this;
  }

  const std::string& name() const { return name_; }
  caf::actor_system* actorSystem() const { return system_; }
  const ::actorpipe::Limits& limits() const { return limits_; }
  std::chrono::microseconds pollWindow() const { return pollWindow_; }
  std::chrono::milliseconds handshakeTimeout() const { return handshakeTimeout_; }
  const std::string& secret() const { return secret_; }
  std::chrono::milliseconds operationTimeout() const { return operationTimeout_; }

 private:
  std::string name_;
  caf::actor_system* system_{nullptr};
  ::actorpipe::Limits limits_;
  std::chrono::microseconds pollWindow_{200};
  std::chrono::milliseconds handshakeTimeout_{30000};
  std::string secret_;
  std::chrono::milliseconds operationTimeout_{0};
};

class PipeOptions {
 public:
  // The name getRemoteName() reports on the connecting side (as in TensorPipe).
  PipeOptions& remoteName(std::string name) {
    remoteName_ = std::move(name);
    return *this;
  }
  // Override the Context's timeouts for this pipe.
  PipeOptions& handshakeTimeout(std::chrono::milliseconds timeout) {
    handshakeTimeout_ = timeout;
    return *this;
  }
  PipeOptions& operationTimeout(std::chrono::milliseconds timeout) {
    operationTimeout_ = timeout;
    return *this;
  }
  const std::string& remoteName() const { return remoteName_; }
  const std::optional<std::chrono::milliseconds>& handshakeTimeout() const { return handshakeTimeout_; }
  const std::optional<std::chrono::milliseconds>& operationTimeout() const { return operationTimeout_; }

 private:
  std::string remoteName_;
  std::optional<std::chrono::milliseconds> handshakeTimeout_;
  std::optional<std::chrono::milliseconds> operationTimeout_;
};

}  // namespace tensorpipe
