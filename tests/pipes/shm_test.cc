// The shm transport between two real processes, and its costs at rest.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "../support/scenarios.h"

using namespace actorpipe;
using namespace testing;

namespace {

// CPU time (user + system) this process has used, in clock ticks.
long cpuTicks() {
  std::ifstream stat("/proc/self/stat");
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 1; i <= 15 && stat >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

}  // namespace

TEST_CASE("shm: ping with payloads and tensors of many sizes comes back intact") {
  EchoPeer peer(1, false, "shm://");
  // Larger than the 2 MiB ring: the writer must wait for the reader.
  Storage sent = makeStorage({1, 100, 4096, 70000}, {0, 8, 1 << 20, 9 << 20}, 3);
  REQUIRE(!writeSync(*peer.pipe, messageOver(sent, "ping")));
  Received r = readSync(*peer.pipe);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.descriptor.metadata == "ping");
  for (size_t i = 0; i < sent.payloads.size(); ++i) CHECK(r.storage.payloads[i] == sent.payloads[i]);
  for (size_t i = 0; i < sent.tensors.size(); ++i) CHECK(r.storage.tensors[i] == sent.tensors[i]);
  CHECK(peer.pipe->info().transport == "shm");
}

TEST_CASE("shm: many queued writes against queued reads, in order") {
  EchoPeer peer(1, false, "shm://");
  constexpr int kCount = 300;
  std::vector<Storage> sent;
  for (int i = 0; i < kCount; ++i) sent.push_back(makeStorage({size_t(i % 5) * 33}, {size_t(i) * 101}, i));
  for (int i = 0; i < kCount; ++i) {
    peer.pipe->write(messageOver(sent[i], std::to_string(i)), [](const Error& e) { CHECK(!e); });
  }
  for (int i = 0; i < kCount; ++i) {
    Received r = readSync(*peer.pipe);
    REQUIRE_MESSAGE(!r.error, r.error.what());
    CHECK(r.descriptor.metadata == std::to_string(i));
    CHECK(r.storage.payloads[0] == sent[i].payloads[0]);
    CHECK(r.storage.tensors[0] == sent[i].tensors[0]);
  }
}

TEST_CASE("shm: a named address, and a name nobody listens on") {
  auto server = makeContext("server");
  std::string name = "actorpipe-test-" + std::to_string(::getpid());
  auto listener = server->listen({"shm://" + name});
  CHECK(listener->address("shm") == name);
  auto client = makeContext("client");
  auto pipe = client->connect("shm://" + name);
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  Storage s = makeStorage({10}, {20}, 1);
  REQUIRE(!writeSync(*pipe, messageOver(s, "named")));
  Received r = readSync(*accepted);
  REQUIRE(!r.error);
  CHECK(r.storage.tensors[0] == s.tensors[0]);

  auto nowhere = client->connect("shm://no-such-" + name);
  Error e = writeSync(*nowhere, Message());
  CHECK(e.isOfType<ConnectError>());
  CHECK(e.what().find("refused") != std::string::npos);
  auto taken = server->listen({"shm://" + name});
  Error a;
  CHECK(acceptSync(*taken, &a) == nullptr);
  CHECK(a.isOfType<SystemError>());
}

TEST_CASE("shm: a peer killed mid-transfer fails the pending operations") {
  killedMidTransfer([](const std::string& name) { return makeContext(name); }, "shm://", 64u << 20);
}

TEST_CASE("shm: data written just before the peer exits is still delivered") {
  Child child = Child::spawn([](Child& self) {
    auto context = makeContext("leaver");
    auto listener = context->listen({"shm://"});
    self.send(listener->url("shm"));
    auto pipe = acceptSync(*listener);
    CHILD_CHECK(pipe != nullptr);
    Storage s;
    s.payloads.push_back(pattern(1000, 42));
    CHILD_CHECK(!writeSync(*pipe, messageOver(s, "last words")));
    ::_exit(0);  // no goodbye: the bytes are in the ring, the socket closes
    return 0;
  });
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = makeContext("client");
  auto pipe = context->connect(url);
  REQUIRE(child.wait() == 0);
  Received r = readSync(*pipe);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.descriptor.metadata == "last words");
  CHECK(r.storage.payloads[0] == pattern(1000, 42));
  Received after = readSync(*pipe);
  CHECK(after.error.isOfType<EOFError>());
}

TEST_CASE("shm: an idle listening context and idle pipes use almost no CPU") {
  EchoPeer peer(1, false, "shm://");
  REQUIRE(!writeSync(*peer.pipe, Message()));
  REQUIRE(!readSync(*peer.pipe).error);
  // Our side: a listener and an idle pipe with a pending readDescriptor.
  auto listener = peer.context->listen({"shm://", "tcp://127.0.0.1:0"});
  peer.pipe->readDescriptor([](const Error&, Descriptor) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past the polling window
  long before = cpuTicks();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  long used = cpuTicks() - before;
  long hz = ::sysconf(_SC_CLK_TCK);
  MESSAGE("idle CPU over 1 s: " << used << " ticks of " << hz);
  // Generous: 5% of one core (TensorPipe's shm uses ~98% here).
  CHECK(used * 20 <= hz);
  peer.pipe->close();
}
