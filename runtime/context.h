#pragma once
// The Context owns everything a process uses to talk: its transports and
// channels (each supervised by the Context's actor), its listeners and pipes,
// and, unless given one, a CAF actor system.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/runtime/options.h>

namespace actorpipe::detail {
class ContextCore;
}

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

class Context final {
 public:
  explicit Context(ContextOptions opts = ContextOptions());
  ~Context();  // joins
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // A URL's scheme is the name its transport was registered under. Higher
  // priority wins when peers choose; peers with different priorities still
  // agree (the accepting side decides, deterministically).
  // Registering a name twice throws std::invalid_argument.
  void registerTransport(int64_t priority, std::string transport,
                         std::shared_ptr<transport::Context> context);
  void registerChannel(int64_t priority, std::string channel,
                       std::shared_ptr<channel::Context> context);

  // Binds now. A URL with an unknown scheme, or one that cannot be bound,
  // makes every accept() fail with the reason.
  std::shared_ptr<Listener> listen(const std::vector<std::string>& urls);
  // Never blocks and never throws: if the peer cannot be reached, the pipe's
  // first operations fail with a ConnectError naming the address and cause.
  std::shared_ptr<Pipe> connect(const std::string& url, PipeOptions opts = PipeOptions());

  void setId(std::string id);

  // Fails every pending operation of every pipe and listener with
  // ContextClosedError. Idempotent.
  void close();
  // close(), then waits until every callback has run and every thread is
  // joined. No callback fires after join() returns.
  void join();

  // For actorpipe's actor layer.
  const std::shared_ptr<::actorpipe::detail::ContextCore>& core() const { return core_; }

 private:
  std::shared_ptr<::actorpipe::detail::ContextCore> core_;
};

}  // namespace tensorpipe
