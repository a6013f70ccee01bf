// The public handles of runtime/ (Context, Listener, Pipe) forward every
// call to their actors' cores (actors/detail/). They are defined here, not
// in runtime/, so that runtime/ stays the bottom layer: it names the
// vocabulary that transports, channels and actors use, and includes nothing
// above it (docs/architecture.md, "Layers"; tests/layers/check.sh).
#include <stdexcept>

#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/listener_core.h>
#include <actorpipe/actors/detail/pipe_core.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/runtime/detail/url.h>

// The handles are TensorPipe's classes, defined in its namespace (runtime/fwd.h).
namespace tensorpipe {
using namespace ::actorpipe;

Context::Context(ContextOptions opts)
    : core_(std::make_shared<detail::ContextCore>(std::move(opts))) {
  core_->start();
}

Context::~Context() { join(); }

void Context::registerTransport(int64_t priority, std::string transport,
                                std::shared_ptr<transport::Context> context) {
  core_->registerTransport(priority, std::move(transport), std::move(context));
}

void Context::registerChannel(int64_t priority, std::string channel,
                              std::shared_ptr<channel::Context> context) {
  core_->registerChannel(priority, std::move(channel), std::move(context));
}

std::shared_ptr<Listener> Context::listen(const std::vector<std::string>& urls) {
  auto core = detail::ListenerCore::create(core_, urls);
  core_->track(core);
  return std::make_shared<Listener>(std::move(core));
}

std::shared_ptr<Pipe> Context::connect(const std::string& url, PipeOptions opts) {
  std::shared_ptr<detail::PipeCore> core;
  std::string scheme, address;
  if (Error closed = core_->closedError()) {
    core = detail::PipeCore::failed(core_, closed);
  } else if (!detail::splitUrl(url, scheme, address)) {
    core = detail::PipeCore::failed(
        core_, ACTORPIPE_ERROR(LogicError, "bad URL '" + url + "': expected scheme://address"));
  } else if (auto transport = core_->transport(scheme)) {
    if (transport->down) {
      core = detail::PipeCore::failed(core_, transport->down);
    } else {
      core = detail::PipeCore::connect(core_, transport, url, address, opts);
      core_->track(core);
    }
  } else {
    core = detail::PipeCore::failed(core_, ACTORPIPE_ERROR(UnknownTransportError, url));
  }
  return std::make_shared<Pipe>(std::move(core), opts.remoteName());
}

void Context::setId(std::string id) { core_->setId(std::move(id)); }

void Context::close() { core_->close(); }

void Context::join() { core_->join(); }

// ---

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

// ---

Pipe::Pipe(std::shared_ptr<detail::PipeCore> core, std::string remoteName)
    : core_(std::move(core)), remoteName_(std::move(remoteName)) {}

Pipe::~Pipe() { close(); }

void Pipe::readDescriptor(read_descriptor_callback_fn fn) { core_->readDescriptor(std::move(fn)); }

void Pipe::read(Allocation allocation, read_callback_fn fn) {
  core_->read(std::move(allocation), std::move(fn));
}

void Pipe::write(Message message, write_callback_fn fn) {
  core_->write(std::move(message), std::move(fn));
}

const std::string& Pipe::getRemoteName() { return remoteName_; }

PipeInfo Pipe::info() const { return core_->info(); }

void Pipe::close() { core_->close(ACTORPIPE_ERROR(PipeClosedError)); }

}  // namespace tensorpipe
