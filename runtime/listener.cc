#include <actorpipe/runtime/listener.h>

#include <stdexcept>

#include <actorpipe/actors/detail/listener_core.h>

namespace actorpipe {

Listener::Listener(std::shared_ptr<detail::ListenerCore> core) : core_(std::move(core)) {}

Listener::~Listener() { close(); }

void Listener::accept(accept_callback_fn fn) { core_->accept(std::move(fn)); }

const std::map<std::string, std::string>& Listener::addresses() const { return core_->addresses(); }

const std::string& Listener::address(const std::string& transport) const {
  auto it = core_->addresses().find(transport);
  if (it == core_->addresses().end()) {
    throw std::out_of_range("this listener has no address for transport '" + transport + "'");
  }
  return it->second;
}

std::string Listener::url(const std::string& transport) const {
  return transport + "://" + address(transport);
}

void Listener::close() { core_->close(ACTORPIPE_ERROR(ListenerClosedError)); }

} // namespace actorpipe
