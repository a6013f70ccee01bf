// Peers pick the best transport and channel they share, whatever URL the
// connector used, and tell why.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "../support/harness.h"

using namespace actorpipe;
using namespace testing;

namespace {

std::shared_ptr<Context> contextWith(const std::string& name, int uvPriority, int shmPriority, bool shm = true) {
  auto context = std::make_shared<Context>(ContextOptions().name(name));
  context->registerTransport(uvPriority, "uv", transport::uv::create());
  if (shm) context->registerTransport(shmPriority, "shm", transport::shm::create());
  context->registerChannel(0, "basic", channel::basic::create());
  return context;
}

std::string joined(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += n + "; ";
  return s;
}

// One round trip that proves the pipe works, returning what it runs on.
PipeInfo roundTrip(Pipe& client, Pipe& server) {
  Storage s;
  s.payloads.push_back(pattern(5000, 1));
  s.tensors.push_back(pattern(300000, 2));
  REQUIRE(!writeSync(client, messageOver(s, "over")));
  Received r = readSync(server);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.storage.payloads[0] == s.payloads[0]);
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  REQUIRE(!writeSync(server, messageOver(s, "back")));
  Received back = readSync(client);
  REQUIRE(!back.error);
  CHECK(back.storage.tensors[0] == s.tensors[0]);
  return client.info();
}

}  // namespace

TEST_CASE("a same-host peer that connects over uv ends up on shm") {
  auto server = contextWith("server", 0, 10);
  auto client = contextWith("client", 0, 10);
  auto listener = server->listen({"shm://", "uv://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("uv"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  PipeInfo info = roundTrip(*pipe, *accepted);
  CHECK(info.transport == "shm");
  CHECK(accepted->info().transport == "shm");
  CHECK(joined(info.notes).find("transport shm: chosen") != std::string::npos);
  CHECK(joined(info.notes).find("transport uv: lower priority than shm") != std::string::npos);
  MESSAGE("notes: " << joined(info.notes));
}

TEST_CASE("peers with different transport priorities still agree") {
  // The client prefers uv, the server shm: the sums decide (5 + 1 vs 0 + 10).
  auto server = contextWith("server", 5, 10);
  auto client = contextWith("client", 1, 0);
  auto listener = server->listen({"shm://", "uv://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("uv"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  PipeInfo info = roundTrip(*pipe, *accepted);
  CHECK(info.transport == "shm");
  CHECK(accepted->info().transport == info.transport);
}

TEST_CASE("a peer without shm stays on uv, and says why") {
  auto server = contextWith("server", 0, 10);
  auto client = contextWith("client", 0, 10, false);
  auto listener = server->listen({"shm://", "uv://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("uv"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  PipeInfo info = roundTrip(*pipe, *accepted);
  CHECK(info.transport == "uv");
  CHECK(joined(info.notes).find("transport shm: the peer does not offer it") != std::string::npos);
}

TEST_CASE("a listener that does not listen on shm keeps the pipe on uv") {
  auto server = contextWith("server", 0, 10);
  auto client = contextWith("client", 0, 10);
  auto listener = server->listen({"uv://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("uv"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  CHECK(roundTrip(*pipe, *accepted).transport == "uv");
}

TEST_CASE("peers in different network namespaces end up on uv") {
  if (::geteuid() != 0 || std::system("ip netns list >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: needs root and iproute2 to make network namespaces");
    return;
  }
  std::string id = std::to_string(::getpid() % 100000);
  std::string a = "apA" + id, b = "apB" + id;
  std::string setup =
      "ip netns add " + a + " && ip netns add " + b + " && ip link add va" + id + " type veth peer name vb" + id +
      " && ip link set va" + id + " netns " + a + " && ip link set vb" + id + " netns " + b +
      " && ip -n " + a + " addr add 169.254.77.1/30 dev va" + id + " && ip -n " + b +
      " addr add 169.254.77.2/30 dev vb" + id + " && ip -n " + a + " link set va" + id + " up && ip -n " + b +
      " link set vb" + id + " up && ip -n " + a + " link set lo up && ip -n " + b + " link set lo up";
  int rc = std::system(setup.c_str());
  struct Cleanup {
    std::string a, b;
    ~Cleanup() { (void)!std::system(("ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null").c_str()); }
  } cleanup{a, b};
  if (rc != 0) {
    MESSAGE("skipped: could not set up network namespaces here");
    return;
  }
  auto enter = [](const std::string& ns) {
    int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    return fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
  };
  // A server in namespace A listening on shm and uv; a client in B, and one
  // in A. Each child reports the transport its pipe ended up on.
  Child server = Child::spawn([&](Child& self) {
    CHILD_CHECK(enter(a));
    auto context = contextWith("server", 0, 10);
    auto listener = context->listen({"shm://", "uv://169.254.77.1:0"});
    self.send(listener->url("uv"));
    for (int i = 0; i < 2; ++i) {
      auto pipe = acceptSync(*listener);
      CHILD_CHECK(pipe != nullptr);
      Received r = readSync(*pipe);
      CHILD_CHECK(!r.error);
      CHILD_CHECK(!writeSync(*pipe, messageOver(r.storage, r.descriptor.metadata)));
      CHILD_CHECK(readSync(*pipe).error);  // the client hangs up
    }
    return 0;
  });
  std::string url = server.receive();
  REQUIRE(!url.empty());
  auto client = [&](const std::string& ns) {
    return Child::spawn([&, ns](Child& self) {
      CHILD_CHECK(enter(ns));
      auto context = contextWith("client", 0, 10);
      auto pipe = context->connect(url);
      Storage s;
      s.tensors.push_back(pattern(100000, 3));
      CHILD_CHECK(!writeSync(*pipe, messageOver(s, "hi")));
      Received r = readSync(*pipe);
      CHILD_CHECK(!r.error);
      CHILD_CHECK(r.storage.tensors[0] == s.tensors[0]);
      self.send(pipe->info().transport + " " + pipe->info().channels["cpu"]);
      return 0;
    });
  };
  Child far = client(b);
  CHECK(far.receive() == "uv basic");
  CHECK(far.wait() == 0);
  Child near = client(a);
  CHECK(near.receive() == "shm basic");
  CHECK(near.wait() == 0);
  CHECK(server.wait() == 0);
}
