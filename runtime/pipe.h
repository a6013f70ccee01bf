#pragma once
// A pipe: an ordered, bidirectional stream of Messages between two contexts.
// This class is a thin handle; the pipe itself is an actor running on its
// transport's loop thread (actors/pipe_actor.h gives its typed interface).
//
// Guarantees: messages are read in the order they were written; callbacks of
// one kind (write, readDescriptor, read) fire in the order of the calls; every
// callback fires exactly once, with an Error if the operation failed.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/message.h>

namespace actorpipe {

namespace detail {
class PipeCore;
}

// What a pipe's handshake chose (an actorpipe extension, for logs, demos
// and benchmarks).
struct PipeInfo {
  bool established{false};
  std::string transport;                        // as registered: "tcp"
  std::map<std::string, std::string> channels;  // device type -> channel
  std::string peerAddress;                      // "127.0.0.1:41234"
  std::string remoteName;                       // the peer context's name
  std::vector<std::string> notes;               // why each transport and channel was or was not chosen
};

}  // namespace actorpipe

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

class Pipe final {
 public:
  using read_descriptor_callback_fn = std::function<void(const Error&, Descriptor)>;
  using read_callback_fn = std::function<void(const Error&)>;
  using write_callback_fn = std::function<void(const Error&)>;
  // A callback that throws is logged (at warn) and the pipe carries on as
  // if it had returned: the exception is not passed on, and an operation it
  // meant to ask for is not asked. (Which thread runs callbacks:
  // docs/architecture.md.)

  // Made by Context::connect and Listener::accept, not by users.
  Pipe(std::shared_ptr<::actorpipe::detail::PipeCore> core, std::string remoteName);
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  // Calls back with the next message's descriptor; the message's data stays
  // on the wire until read() asks for it.
  void readDescriptor(read_descriptor_callback_fn fn);
  // Receives the data of the last descriptor into `allocation`. Calling it
  // with no descriptor waiting, or with an allocation whose counts do not
  // match the descriptor, fails with a LogicError (the descriptor stays
  // waiting for a correct read).
  void read(Allocation allocation, read_callback_fn fn);
  // The message's memory must stay valid until `fn` fires.
  void write(Message message, write_callback_fn fn);

  // The peer's context name (accepting side) or PipeOptions::remoteName
  // (connecting side), as in TensorPipe.
  const std::string& getRemoteName();

  // Empty until the handshake completes (established == false).
  ::actorpipe::PipeInfo info() const;

  // Fails every pending operation with PipeClosedError. Idempotent.
  void close();

  // For actorpipe's actor layer.
  const std::shared_ptr<::actorpipe::detail::PipeCore>& core() const { return core_; }

 private:
  std::shared_ptr<::actorpipe::detail::PipeCore> core_;
  std::string remoteName_;
};

}  // namespace tensorpipe
