#pragma once
// A channel that lies: registered under a real channel's name, it claims
// the domain (and hello detail) of the attacker's choice, hands out the setup
// of its choice and describes every tensor with the descriptor of its
// choice. Attackers in tests/hostile/ run actorpipe with one of these.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../support/harness.h"

namespace testing {

// An endpoint that describes no real memory: send() returns `descriptor`
// whatever it is given (and calls the write done), recv() refuses.
class ForgedEndpoint final : public actorpipe::channel::Endpoint {
 public:
  explicit ForgedEndpoint(std::string descriptor) : descriptor_(std::move(descriptor)) {}
  std::string send(const void*, size_t, done_fn done) override {
    done(actorpipe::Error());
    return descriptor_;
  }
  void recv(const std::string&, void*, size_t, done_fn done) override {
    done(ACTORPIPE_ERROR(actorpipe::ProtocolError, "forged endpoint"));
  }
  void close(const actorpipe::Error&) override {}

 private:
  std::string descriptor_;
};

struct Forgery {
  std::string domain;
  std::string detail;                       // the hello detail (cma: pid and probe)
  std::string descriptor;                   // for every tensor sent
  std::string setup = std::string(32, '0'); // in the welcome, when accepting
};

class ForgedChannel final : public actorpipe::channel::Context {
 public:
  explicit ForgedChannel(Forgery forgery) : forgery_(std::move(forgery)) {}
  const std::vector<std::string>& deviceTypes() const override { return devices_; }
  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return forgery_.domain; }
  void setId(std::string) override {}
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }
  std::string helloDetail() const override { return forgery_.detail; }
  std::shared_ptr<actorpipe::channel::Endpoint> acceptEndpoint(std::string& setup, actorpipe::Error&) override {
    setup = forgery_.setup;
    return std::make_shared<ForgedEndpoint>(forgery_.descriptor);
  }
  std::shared_ptr<actorpipe::channel::Endpoint> connectEndpoint(const std::string&, actorpipe::Error&) override {
    return std::make_shared<ForgedEndpoint>(forgery_.descriptor);
  }

 private:
  std::vector<std::string> devices_{actorpipe::kCpuDeviceType};
  Forgery forgery_;
};

// tcp, shm and basic, plus the forged channel under `name` at a priority
// that wins.
inline std::shared_ptr<actorpipe::Context> attackerContext(const std::string& name, Forgery forgery) {
  using namespace actorpipe;
  auto context = std::make_shared<Context>(ContextOptions().name("attacker"));
  context->registerTransport(0, "tcp", transport::uv::create());
  context->registerTransport(10, "shm", transport::shm::create());
  context->registerChannel(0, "basic", channel::basic::create());
  context->registerChannel(100, name, std::make_shared<ForgedChannel>(std::move(forgery)));
  return context;
}

// A server in a child process that runs the forged channel `name` made by
// `forge` (called in the child), accepts one pipe and reads until the peer
// gives up. Its URL is the child's first line.
inline Child spawnForgedServer(const std::string& name, std::function<Forgery()> forge) {
  return Child::spawn([=](Child& self) {
    auto context = attackerContext(name, forge());
    auto listener = context->listen({"tcp://127.0.0.1:0"});
    self.send(listener->url("tcp"));
    auto pipe = acceptSync(*listener);
    if (pipe) readSync(*pipe, std::chrono::seconds(10));
    return 0;
  });
}

} // namespace testing
