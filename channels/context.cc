#include <actorpipe/channels/context.h>

namespace actorpipe::channel {

namespace {
Error wrongKind(const Buffer& buffer) {
  return ACTORPIPE_ERROR(LogicError, "this channel moves CPU tensors, not tensors on " + buffer.device().toString());
}
}  // namespace

std::string Endpoint::sendBuffer(const Buffer& buffer, size_t length, done_fn done) {
  if (buffer.device().type != kCpuDeviceType) {
    done(wrongKind(buffer));
    return std::string();
  }
  return send(buffer.unwrap<CpuBuffer>().ptr, length, std::move(done));
}

void Endpoint::recvBuffer(const std::string& descriptor, const Buffer& buffer, size_t length, done_fn done) {
  if (buffer.device().type != kCpuDeviceType) return done(wrongKind(buffer));
  recv(descriptor, buffer.unwrap<CpuBuffer>().ptr, length, std::move(done));
}

}  // namespace actorpipe::channel
