#pragma once
// Scenarios that every transport and channel must pass, written once.
// Header-only: they use doctest's assertions.
#include <doctest/doctest.h>

#include <signal.h>

#include <functional>
#include <future>
#include <thread>

#include "harness.h"

namespace testing {

using ContextMaker = std::function<std::shared_ptr<actorpipe::Context>(const std::string& name)>;

// The parent's side of a forked echo server: a context and one pipe to it.
struct EchoPeer {
  Child child;
  std::shared_ptr<actorpipe::Context> context;
  std::shared_ptr<actorpipe::Pipe> pipe;
  std::string url;

  explicit EchoPeer(int pipes = 1, bool withMpt = false, const std::string& listenUrl = "tcp://127.0.0.1:0")
      : child(Child::spawn([=](Child& self) { return echoServer(self, pipes, withMpt, listenUrl); })) {
    url = child.receive();
    REQUIRE(!url.empty());
    context = makeContext("client", actorpipe::ContextOptions(), withMpt);
    pipe = context->connect(url);
  }
  ~EchoPeer() {
    pipe.reset();
    context->join();
    CHECK(child.wait() == 0);
  }
};

// A peer that accepts a pipe, reads one descriptor, never reads its data,
// and is killed (SIGKILL) while we write `bytes`: our write and our pending
// readDescriptor fail, promptly; then the context still works.
inline void killedMidTransfer(const ContextMaker& make, const std::string& listenUrl, size_t bytes) {
  std::string scheme = listenUrl.substr(0, listenUrl.find(':'));
  Child child = Child::spawn([&](Child& self) {
    auto context = make("victim");
    auto listener = context->listen({listenUrl});
    self.send(listener->url(scheme));
    auto pipe = acceptSync(*listener);
    CHILD_CHECK(pipe != nullptr);
    std::promise<void> described;
    pipe->readDescriptor([&](const actorpipe::Error&, actorpipe::Descriptor) { described.set_value(); });
    described.get_future().wait();
    self.send("descriptor");
    std::this_thread::sleep_for(std::chrono::seconds(60));  // until killed
    return 0;
  });
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = make("client");
  auto pipe = context->connect(url);
  Storage big;
  big.tensors.push_back(std::vector<uint8_t>(bytes, 7));
  std::promise<actorpipe::Error> written, described;
  pipe->write(messageOver(big, "big"), [&](const actorpipe::Error& e) { written.set_value(e); });
  pipe->readDescriptor([&](const actorpipe::Error& e, actorpipe::Descriptor) { described.set_value(e); });
  REQUIRE(child.receive() == "descriptor");
  child.kill(SIGKILL);
  CHECK(child.wait() == 128 + SIGKILL);
  auto w = written.get_future();
  auto d = described.get_future();
  REQUIRE(ready(w, std::chrono::seconds(10)));
  REQUIRE(ready(d, std::chrono::seconds(10)));
  actorpipe::Error we = w.get(), de = d.get();
  CHECK(we);
  CHECK(de);
  MESSAGE(scheme << ": the write failed with: " << we.what());
  // The context is still usable.
  auto listener = context->listen({listenUrl});
  auto other = context->connect(listener->url(scheme));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  Storage s;
  s.payloads.push_back(pattern(100, 9));
  REQUIRE(!writeSync(*other, messageOver(s, "after")));
  Received got = readSync(*accepted);
  REQUIRE(!got.error);
  CHECK(got.storage.payloads[0] == s.payloads[0]);
}

} // namespace testing
