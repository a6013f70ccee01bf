#include <actorpipe/runtime/pipe.h>

#include <actorpipe/actors/detail/pipe_core.h>

namespace actorpipe {

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

} // namespace actorpipe
