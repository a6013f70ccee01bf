// A header written for TensorPipe forward-declares its classes before any
// TensorPipe include, as PyTorch's RPC agent does (tensorpipe_agent.h,
// tensorpipe_utils.h); the .cc file includes <tensorpipe/tensorpipe.h> later.
// Both parts are here, in that order: this only compiles if `tensorpipe` is
// a namespace that holds the definitions (an alias is rejected).
#include <memory>
#include <string>
#include <type_traits>

namespace tensorpipe {
class Allocation;
class Buffer;
class Context;
class ContextOptions;
class Descriptor;
class Error;
class Listener;
class Message;
class Pipe;
class PipeOptions;
struct CpuBuffer;
struct Device;
namespace transport {
class Context;
}  // namespace transport
namespace channel {
class Context;
}  // namespace channel
}  // namespace tensorpipe

namespace agent {
// What such a header holds: pointers to the forward-declared classes, and
// member functions taking them.
class Agent {
 public:
  Agent();
  ~Agent();
  std::string roundTrip(const std::string& text);

 private:
  void onAccepted(const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> pipe);
  std::shared_ptr<tensorpipe::Context> context_;
  std::shared_ptr<tensorpipe::Listener> listener_;
  std::shared_ptr<tensorpipe::Pipe> client_;
  std::shared_ptr<tensorpipe::Pipe> server_;
  std::shared_ptr<tensorpipe::transport::Context> tcp_;
  std::shared_ptr<tensorpipe::channel::Context> basic_;
};
}  // namespace agent

// ---- the .cc file ---------------------------------------------------------
#include <tensorpipe/tensorpipe.h>

#include <actorpipe/runtime/pipe.h>

#include <chrono>
#include <future>

#include "doctest/doctest.h"

// One class under both names, as the forward declarations require.
static_assert(std::is_same_v<tensorpipe::Pipe, actorpipe::Pipe>);
static_assert(std::is_same_v<tensorpipe::Context, actorpipe::Context>);
static_assert(std::is_same_v<tensorpipe::Message, actorpipe::Message>);
static_assert(std::is_same_v<tensorpipe::Error, actorpipe::Error>);
static_assert(std::is_same_v<tensorpipe::Device, actorpipe::Device>);
static_assert(std::is_same_v<tensorpipe::transport::Context, actorpipe::transport::Context>);
static_assert(std::is_same_v<tensorpipe::channel::Context, actorpipe::channel::Context>);
static_assert(std::is_same_v<tensorpipe::transport::EOFError, actorpipe::EOFError>);

namespace agent {

// Unqualified, under `using namespace tensorpipe`, as TensorPipe's own tests
// write it: `transport` must name one namespace, not two.
using namespace tensorpipe;

Agent::Agent() : context_(std::make_shared<Context>(ContextOptions().name("agent"))) {
  tcp_ = transport::uv::create();
  basic_ = channel::basic::create();
  context_->registerTransport(0, "tcp", tcp_);
  context_->registerChannel(0, "basic", basic_);
  listener_ = context_->listen({"tcp://127.0.0.1:0"});
  std::promise<void> accepted;
  listener_->accept([this, &accepted](const Error& error, std::shared_ptr<Pipe> pipe) {
    onAccepted(error, std::move(pipe));
    accepted.set_value();
  });
  client_ = context_->connect(listener_->url("tcp"), PipeOptions().remoteName("agent"));
  auto ready = accepted.get_future();
  REQUIRE(ready.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
}

Agent::~Agent() { context_->join(); }

void Agent::onAccepted(const Error& error, std::shared_ptr<Pipe> pipe) {
  REQUIRE_MESSAGE(!error, error.what());
  server_ = std::move(pipe);
}

std::string Agent::roundTrip(const std::string& text) {
  std::string sent = text;
  Message message;
  message.metadata = "fwd";
  message.tensors.push_back({CpuBuffer{&sent[0]}, sent.size(), nullopt, ""});
  client_->write(message, [](const Error&) {});
  std::promise<std::string> got;
  std::string received;
  server_->readDescriptor([&](const Error& error, Descriptor descriptor) {
    if (error) return got.set_value("error: " + error.what());
    received.assign(descriptor.tensors.at(0).length, '\0');
    Allocation allocation;
    allocation.tensors.push_back({CpuBuffer{&received[0]}});
    server_->read(allocation, [&](const Error& error) {
      got.set_value(error ? "error: " + error.what() : received);
    });
  });
  auto f = got.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  return f.get();
}

}  // namespace agent

TEST_CASE("a TensorPipe user's forward declarations name actorpipe's classes") {
  agent::Agent a;
  CHECK(a.roundTrip("forward-declared") == "forward-declared");
}
