// Hostile peers against the pull channels (xth, cma): docs/security.md,
// "Pull channels". Each attacker is a real process running actorpipe with a
// forged channel: it claims the victim's xth or cma domain (the strings are
// no secret) and sends the descriptors of its choice. On main before this
// suite, these let a remote peer read and write the victim's memory (xth)
// and a local user of another uid act through a root victim (cma).
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <future>

#include <actorpipe/channels/detail/pull_descriptor.h>

#include "../support/harness.h"

using namespace actorpipe;
using namespace testing;
using channel::detail::PullDescriptor;
using channel::detail::PullFormat;
using channel::detail::parsePullDescriptor;

namespace {

// An endpoint that describes no real memory: send() returns `descriptor`
// whatever it is given (and calls the write done), recv() refuses.
class ForgedEndpoint final : public channel::Endpoint {
 public:
  explicit ForgedEndpoint(std::string descriptor) : descriptor_(std::move(descriptor)) {}
  std::string send(const void*, size_t, done_fn done) override {
    done(Error());
    return descriptor_;
  }
  void recv(const std::string&, void*, size_t, done_fn done) override {
    done(ACTORPIPE_ERROR(ProtocolError, "forged endpoint"));
  }
  void close(const Error&) override {}

 private:
  std::string descriptor_;
};

// A channel registered under the victim's channel name that claims the
// victim's domain (and, for cma, the victim's probe) and forges descriptors.
class ForgedChannel final : public channel::Context {
 public:
  ForgedChannel(std::string domain, std::string detail, std::string descriptor)
      : domain_(std::move(domain)), detail_(std::move(detail)), descriptor_(std::move(descriptor)) {}
  const std::vector<std::string>& deviceTypes() const override { return devices_; }
  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string) override {}
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }
  std::string helloDetail() const override { return detail_; }
  std::shared_ptr<channel::Endpoint> acceptEndpoint(std::string& setup, Error&) override {
    setup = std::string(32, '0');  // not a token the victim handed out
    return std::make_shared<ForgedEndpoint>(descriptor_);
  }
  std::shared_ptr<channel::Endpoint> connectEndpoint(const std::string&, Error&) override {
    return std::make_shared<ForgedEndpoint>(descriptor_);
  }

 private:
  std::vector<std::string> devices_{kCpuDeviceType};
  std::string domain_, detail_, descriptor_;
};

std::shared_ptr<Context> attackerContext(const std::string& channelName, std::shared_ptr<channel::Context> forged) {
  auto context = std::make_shared<Context>(ContextOptions().name("attacker"));
  context->registerTransport(0, "tcp", transport::uv::create());
  context->registerTransport(10, "shm", transport::shm::create());
  context->registerChannel(0, "basic", channel::basic::create());
  context->registerChannel(100, channelName, std::move(forged));
  return context;
}

std::string joined(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += n + "; ";
  return s;
}

// What the victim holds that no peer may read.
const char kSecret[] = "the victim's secret, 64 bytes long.............................";

// Writes one message with a 64 KiB tensor (above xth's and cma's inline
// sizes, so its descriptor is the forged one), then waits for the victim to
// hang up.
int attack(Child& self, const std::string& url, std::shared_ptr<Context> context) {
  auto pipe = context->connect(url);
  Storage s = makeStorage({}, {65536}, 1);
  Error e = writeSync(*pipe, messageOver(s, "attack"));
  self.send(e ? "write failed: " + e.what() : "written");
  Received r = readSync(*pipe, std::chrono::seconds(20));  // the victim's answer: EOF or an error
  self.send(r.error ? "read failed: " + r.error.what() : "read a message");
  pipe.reset();
  context->join();
  return 0;
}

// The victim's side: accept one pipe, read one message; returns the error.
Error victimReads(Listener& listener, PipeInfo* info = nullptr) {
  Error acceptError;
  auto pipe = acceptSync(listener, &acceptError);
  if (!pipe) return acceptError;
  Received r = readSync(*pipe);
  if (info) *info = pipe->info();
  return r.error;
}

// After an attack: a good peer is still served.
void goodPeerServed(Listener& listener, const std::string& url) {
  auto client = makeFullContext("good");
  auto pipe = client->connect(url);
  Storage s = makeStorage({10}, {65536}, 5);
  std::promise<Error> written;
  pipe->write(messageOver(s, "good"), [&](const Error& e) { written.set_value(e); });
  auto accepted = acceptSync(listener);
  REQUIRE(accepted != nullptr);
  Received r = readSync(*accepted);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  auto w = written.get_future();
  REQUIRE(ready(w, std::chrono::seconds(20)));
  CHECK(!w.get());
  pipe.reset();
  client->join();
}

}  // namespace

TEST_CASE("pull descriptors: exactly their fields, digits only, no overflow") {
  PullDescriptor d;
  CHECK(!parsePullDescriptor("1:65536", PullFormat::kInProcess, "xth", d));
  CHECK(d.seq == 1);
  CHECK(d.length == 65536);
  CHECK(!parsePullDescriptor("7:4096:7f00a000:55d0c2a01040", PullFormat::kCrossProcess, "cma", d));
  CHECK(d.address == 0x7f00a000);
  CHECK(d.ack == 0x55d0c2a01040);
  for (const char* bad : {"", ":", "1:", ":1", "1:2:3", "1:-2", "+1:2", " 1:2", "1:2 ", "0x1:2",
                          "18446744073709551616:1", "1:99999999999999999999", "1;2", "1:2\n"}) {
    CAPTURE(bad);
    CHECK(parsePullDescriptor(bad, PullFormat::kInProcess, "xth", d).isOfType<ProtocolError>());
  }
  // The old format named the sender's pid; nothing names a pid now.
  for (const char* bad : {"1234:7f00:4096:7f08:1", "1:2:3", "1:2:g:1", "1:2:3:4:5", "1:2:12345678901234567:1"}) {
    CAPTURE(bad);
    CHECK(parsePullDescriptor(bad, PullFormat::kCrossProcess, "cma", d).isOfType<ProtocolError>());
  }
}

TEST_CASE("xth: a peer in another process that claims our xth domain reads nothing") {
  auto victim = makeFullContext("victim");
  auto listener = victim->listen({"tcp://127.0.0.1:0"});
  const std::string url = listener->url("tcp");
  const std::string domain = channel::xth::create()->domainDescriptor();  // what our hello tells anyone
  char oldStyle[128];  // the old descriptor: our pid, the secret's address, our memory's length
  std::snprintf(oldStyle, sizeof(oldStyle), "%d:%" PRIxPTR ":65536:%" PRIxPTR ":1", int(::getpid()),
                reinterpret_cast<uintptr_t>(kSecret), reinterpret_cast<uintptr_t>(kSecret));
  for (std::string descriptor : {std::string(oldStyle), std::string("1:65536")}) {
    CAPTURE(descriptor);
    Child attacker = Child::spawn([&](Child& self) {
      return attack(self, url, attackerContext("xth", std::make_shared<ForgedChannel>(domain, "", descriptor)));
    });
    PipeInfo info;
    Error e = victimReads(*listener, &info);
    CHECK(info.channels["cpu"] == "xth");  // negotiated: the domain is no secret...
    REQUIRE(e);                            // ...but the read fails cleanly
    CHECK_MESSAGE(e.isOfType<ProtocolError>(), e.what());
    CHECK(attacker.receive() == "written");
    CHECK(attacker.receive().rfind("read failed", 0) == 0);
    CHECK(attacker.wait() == 0);
  }
  goodPeerServed(*listener, url);
}

TEST_CASE("xth: a server in another process that claims our xth domain gets no endpoint") {
  const std::string domain = channel::xth::create()->domainDescriptor();
  Child server = Child::spawn([&](Child& self) {
    auto context = attackerContext("xth", std::make_shared<ForgedChannel>(domain, "", "1:65536"));
    auto listener = context->listen({"tcp://127.0.0.1:0"});
    self.send(listener->url("tcp"));
    auto pipe = acceptSync(*listener);
    if (pipe) readSync(*pipe, std::chrono::seconds(10));
    return 0;
  });
  const std::string url = server.receive();
  REQUIRE(!url.empty());
  auto victim = makeFullContext("victim");
  auto pipe = victim->connect(url);
  Storage s = makeStorage({}, {65536}, 2);
  Error e = writeSync(*pipe, messageOver(s, "to a liar"));
  REQUIRE(e);
  CHECK_MESSAGE(e.isOfType<NegotiationError>(), e.what());
  CHECK(e.what().find("not in this process") != std::string::npos);
  pipe.reset();
  victim->join();
  CHECK(server.wait() == 0);
}

TEST_CASE("cma: a peer that names another process's pid is not believed") {
  // The attacker runs as our user, connects over shm (the kernel names it),
  // and claims to be a third process of ours: its hello carries the third
  // process's pid and probe address (the probe has one address in every
  // fork of this binary). Before, the victim probed and then read that pid.
  Child third = Child::spawn([](Child& self) {
    self.send("ready");
    ::pause();
    return 0;
  });
  REQUIRE(third.receive() == "ready");
  auto victim = makeFullContext("victim");
  auto listener = victim->listen({"shm://"});
  const std::string url = listener->url("shm");
  auto cma = channel::cma::create();
  std::string detail = cma->helloDetail();  // "ourpid:probe:length"
  detail = std::to_string(third.pid()) + detail.substr(detail.find(':'));
  Child attacker = Child::spawn([&](Child& self) {
    return attack(self, url, attackerContext("cma", std::make_shared<ForgedChannel>(
                                                        cma->domainDescriptor(), detail, "1:65536:1000:2000")));
  });
  PipeInfo info;
  Error e = victimReads(*listener, &info);
  CHECK(info.channels["cpu"] == "basic");
  CHECK_MESSAGE(joined(info.notes).find("the kernel says pid " + std::to_string(attacker.pid())) !=
                    std::string::npos,
                joined(info.notes));
  CHECK(attacker.wait() == 0);
  third.kill(SIGKILL);
  third.wait();
  goodPeerServed(*listener, url);
}

TEST_CASE("cma: a peer of another user is refused whatever uid it claims") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to run a peer as another user");
    return;
  }
  auto victim = makeFullContext("victim");
  auto listener = victim->listen({"shm://"});
  const std::string url = listener->url("shm");
  auto cma = channel::cma::create();
  const std::string domain = cma->domainDescriptor();  // claims uid 0, like ours
  Child attacker = Child::spawn([&](Child& self) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 9;
    // Its probe detail would be its own; the uid is what gives it away.
    auto own = channel::cma::create()->helloDetail();
    return attack(self, url, attackerContext("cma", std::make_shared<ForgedChannel>(domain, own, "1:65536:1000:2000")));
  });
  PipeInfo info;
  Error e = victimReads(*listener, &info);
  CHECK(info.channels["cpu"] == "basic");
  CHECK_MESSAGE(joined(info.notes).find("runs as uid 65534") != std::string::npos, joined(info.notes));
  CHECK(attacker.wait() == 0);
  goodPeerServed(*listener, url);
}

TEST_CASE("cma: a peer that moves to shm from tcp is checked at its first read") {
  // Over tcp the kernel cannot name the peer, so the handshake trusts the
  // domain; the pipe moves to shm, and the first read checks the process the
  // kernel names there. As another user: refused at that read.
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to run a peer as another user");
    return;
  }
  auto victim = makeFullContext("victim");
  auto listener = victim->listen({"tcp://127.0.0.1:0", "shm://"});
  const std::string url = listener->url("tcp");
  auto cma = channel::cma::create();
  const std::string domain = cma->domainDescriptor();
  const std::string detail = cma->helloDetail();
  Child attacker = Child::spawn([&](Child& self) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 9;
    return attack(self, url, attackerContext("cma", std::make_shared<ForgedChannel>(domain, detail, "1:65536:1000:2000")));
  });
  PipeInfo info;
  Error e = victimReads(*listener, &info);
  CHECK(info.transport == "shm");
  CHECK(info.channels["cpu"] == "cma");
  REQUIRE(e);
  CHECK_MESSAGE(e.what().find("runs as uid 65534") != std::string::npos, e.what());
  CHECK(attacker.wait() == 0);
  goodPeerServed(*listener, url);
}
