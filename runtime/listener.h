#pragma once
// Accepts pipes on one or more URLs. A thin handle on the listener's actor.
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::detail {
class ListenerCore;
}

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe {

class Listener final {
 public:
  using accept_callback_fn = std::function<void(const Error&, std::shared_ptr<Pipe>)>;

  explicit Listener(std::shared_ptr<::actorpipe::detail::ListenerCore> core);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Calls back once, with the next pipe whose handshake completed. Call it
  // again (from the callback, typically) for the next one. A callback that
  // throws is logged (at warn); the listener carries on.
  void accept(accept_callback_fn fn);

  // Transport name -> bound address ("tcp" -> "127.0.0.1:41234").
  const std::map<std::string, std::string>& addresses() const;
  // Throws std::out_of_range for a transport this listener does not use.
  const std::string& address(const std::string& transport) const;
  // "tcp://127.0.0.1:41234": what a peer passes to Context::connect.
  std::string url(const std::string& transport) const;

  // Fails pending accepts with ListenerClosedError. Idempotent.
  void close();

 private:
  std::shared_ptr<::actorpipe::detail::ListenerCore> core_;
};

}  // namespace tensorpipe
