#include <actorpipe/runtime/context.h>

#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/listener_core.h>
#include <actorpipe/actors/detail/pipe_core.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe {

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

} // namespace actorpipe
