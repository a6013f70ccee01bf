// Hostile peers against the pull channels (xth, cma): docs/security.md,
// "Pull channels". Each attacker is a real process running actorpipe with a
// forged channel: it claims the victim's xth or cma domain (the strings are
// no secret) and sends the descriptors of its choice. On main before this
// suite, these let a remote peer read and write the victim's memory (xth)
// and a local user of another uid act through a root victim (cma).
//
// The victim runs in a child too, and no process forks while it holds a
// live Context (a fork copies other threads' locked mutexes, not the threads).
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <future>

#include <actorpipe/channels/detail/pull_descriptor.h>

#include "../support/harness.h"
#include "forged_channel.h"

using namespace actorpipe;
using namespace testing;
using channel::detail::PullDescriptor;
using channel::detail::PullFormat;
using channel::detail::parsePullDescriptor;

namespace {

std::string joined(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += n + "; ";
  return s;
}

// What the victim holds that no peer may read.
const char kSecret[] = "the victim's secret, 64 bytes long.............................";

// The victim: every backend, listening on `urls`. Sends its URL on
// `scheme`, its xth domain, its cma domain and its cma hello detail; then,
// for each of `pipes` pipes, reads one message, reports
// "transport|channel|error|notes" and echoes the message if it read fine.
struct Victim {
  Child child;
  std::string url, xthDomain, cmaDomain, cmaDetail;
};

Victim spawnVictim(std::vector<std::string> urls, std::string scheme, int pipes) {
  Child child = Child::spawn([=](Child& self) {
    auto context = makeFullContext("victim");
    auto listener = context->listen(urls);
    self.send(listener->url(scheme));
    self.send(channel::xth::create()->domainDescriptor());
    auto cma = channel::cma::create();
    self.send(cma->domainDescriptor());
    self.send(cma->helloDetail());
    for (int i = 0; i < pipes; ++i) {
      auto pipe = acceptSync(*listener);
      CHILD_CHECK(pipe != nullptr);
      Received r = readSync(*pipe);
      PipeInfo info = pipe->info();
      self.send(info.transport + "|" + info.channels["cpu"] + "|" + (r.error ? r.error.what() : "") + "|" +
                joined(info.notes));
      if (!r.error) CHILD_CHECK(!writeSync(*pipe, messageOver(r.storage, r.descriptor.metadata)));
    }
    return 0;
  });
  Victim v{std::move(child), {}, {}, {}, {}};
  v.url = v.child.receive();
  v.xthDomain = v.child.receive();
  v.cmaDomain = v.child.receive();
  v.cmaDetail = v.child.receive();
  REQUIRE(!v.url.empty());
  return v;
}

struct Report {
  std::string transport, channel, error, notes;
};

Report nextReport(Victim& victim) {
  std::string line = victim.child.receive();
  Report r;
  std::string* fields[] = {&r.transport, &r.channel, &r.error, &r.notes};
  size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    size_t bar = i < 3 ? line.find('|', at) : std::string::npos;
    *fields[i] = line.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  return r;
}

// Writes one message with a 64 KiB tensor (above xth's and cma's inline
// sizes, so its descriptor is the forged one), then waits for the victim to
// answer or hang up.
Child spawnAttacker(const std::string& url, const std::string& channelName, Forgery forgery,
                    bool asNobody = false) {
  return Child::spawn([=](Child&) {
    if (asNobody && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 9;
    auto context = attackerContext(channelName, forgery);
    auto pipe = context->connect(url);
    Storage s = makeStorage({}, {65536}, 1);
    writeSync(*pipe, messageOver(s, "attack"));
    readSync(*pipe, std::chrono::seconds(20));
    pipe.reset();
    context->join();
    return 0;
  });
}

// A good peer is served, after the attacks (the victim's last pipe).
void goodPeerServed(Victim& victim) {
  auto client = makeFullContext("good");
  auto pipe = client->connect(victim.url);
  Storage s = makeStorage({10}, {65536}, 5);
  REQUIRE(!writeSync(*pipe, messageOver(s, "good")));
  Received r = readSync(*pipe);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  CHECK(nextReport(victim).error.empty());
  pipe.reset();
  client->join();
  CHECK(victim.child.wait() == 0);
}

}  // namespace

TEST_CASE("pull descriptors: exactly their fields, digits only, no overflow") {
  PullDescriptor d;
  CHECK(!parsePullDescriptor("1:65536", PullFormat::kInProcess, "xth", d));
  CHECK(d.seq == 1);
  CHECK(d.length == 65536);
  CHECK(!parsePullDescriptor("7:4096:7f00a000:55d0c2a01040:13", PullFormat::kCrossProcess, "cma", d));
  CHECK(d.address == 0x7f00a000);
  CHECK(d.ack == 0x55d0c2a01040);
  CHECK(d.assist == 13);
  for (const char* bad : {"", ":", "1:", ":1", "1:2:3", "1:-2", "+1:2", " 1:2", "1:2 ", "0x1:2",
                          "18446744073709551616:1", "1:99999999999999999999", "1;2", "1:2\n"}) {
    CAPTURE(bad);
    CHECK(parsePullDescriptor(bad, PullFormat::kInProcess, "xth", d).isOfType<ProtocolError>());
  }
  // The old format named the sender's pid; nothing names a pid now.
  for (const char* bad : {"1234:7f00:4096:7f08", "1:2:3", "1:2:g:1:0", "1:2:3:4:5:6", "1:2:12345678901234567:1:0",
                          "1:2:3:4", "1:2:3:4:a", "1:2:3:4:"}) {
    CAPTURE(bad);
    CHECK(parsePullDescriptor(bad, PullFormat::kCrossProcess, "cma", d).isOfType<ProtocolError>());
  }
}

TEST_CASE("xth: a peer in another process that claims our xth domain reads nothing") {
  Victim victim = spawnVictim({"tcp://127.0.0.1:0"}, "tcp", 3);
  char oldStyle[128];  // the old descriptor: the victim's pid, its secret's address, our length
  std::snprintf(oldStyle, sizeof(oldStyle), "%d:%" PRIxPTR ":65536:%" PRIxPTR ":1", int(victim.child.pid()),
                reinterpret_cast<uintptr_t>(kSecret), reinterpret_cast<uintptr_t>(kSecret));
  for (std::string descriptor : {std::string(oldStyle), std::string("1:65536")}) {
    CAPTURE(descriptor);
    Child attacker = spawnAttacker(victim.url, "xth", Forgery{victim.xthDomain, "", descriptor});
    Report r = nextReport(victim);
    CHECK(r.channel == "xth");  // negotiated: the domain is no secret...
    CHECK_MESSAGE(r.error.rfind("protocol error", 0) == 0, r.error);  // ...but the read fails cleanly
    CHECK(attacker.wait() == 0);
  }
  goodPeerServed(victim);
}

TEST_CASE("xth: a server in another process that claims our xth domain gets no endpoint") {
  const std::string domain = channel::xth::create()->domainDescriptor();  // ours, the parent's
  Child server = spawnForgedServer("xth", [domain] { return Forgery{domain, "", "1:65536"}; });
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
  // The attacker runs as the victim's user, connects over shm (the kernel
  // names it) and claims to be a third process: its hello carries the
  // third's pid and probe address (the probe has one address in every fork
  // of this binary). Before, the victim probed and then read that pid.
  Child third = Child::spawn([](Child& self) {
    self.send("ready");
    ::pause();
    return 0;
  });
  REQUIRE(third.receive() == "ready");
  Victim victim = spawnVictim({"shm://"}, "shm", 2);
  const std::string detail =
      std::to_string(third.pid()) + victim.cmaDetail.substr(victim.cmaDetail.find(':'));
  Child attacker = spawnAttacker(victim.url, "cma", Forgery{victim.cmaDomain, detail, "1:65536:1000:2000:0"});
  Report r = nextReport(victim);
  CHECK(r.channel == "basic");
  CHECK_MESSAGE(r.notes.find("the kernel says pid " + std::to_string(attacker.pid())) != std::string::npos,
                r.notes);
  CHECK(attacker.wait() == 0);
  third.kill(SIGKILL);
  third.wait();
  goodPeerServed(victim);
}

TEST_CASE("cma: a peer of another user is refused whatever uid it claims") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to run a peer as another user");
    return;
  }
  Victim victim = spawnVictim({"shm://"}, "shm", 2);
  // It claims the victim's domain (uid 0); the kernel gives it away.
  Child attacker = spawnAttacker(victim.url, "cma", Forgery{victim.cmaDomain, victim.cmaDetail, "1:65536:1000:2000:0"},
                                 /*asNobody=*/true);
  Report r = nextReport(victim);
  CHECK(r.channel == "basic");
  CHECK_MESSAGE(r.notes.find("runs as uid 65534") != std::string::npos, r.notes);
  CHECK(attacker.wait() == 0);
  goodPeerServed(victim);
}

TEST_CASE("cma: a peer that moves to shm from tcp is checked at its first read") {
  // Over tcp the kernel cannot name the peer, so the handshake trusts the
  // domain; the pipe moves to shm, and the first read checks the process the
  // kernel names there. As another user: refused at that read.
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to run a peer as another user");
    return;
  }
  Victim victim = spawnVictim({"tcp://127.0.0.1:0", "shm://"}, "tcp", 2);
  Child attacker = spawnAttacker(victim.url, "cma", Forgery{victim.cmaDomain, victim.cmaDetail, "1:65536:1000:2000:0"},
                                 /*asNobody=*/true);
  Report r = nextReport(victim);
  CHECK(r.transport == "shm");
  CHECK(r.channel == "cma");
  CHECK_MESSAGE(r.error.find("runs as uid 65534") != std::string::npos, r.error);
  CHECK(attacker.wait() == 0);
  goodPeerServed(victim);
}
