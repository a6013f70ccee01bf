// The mpt channel between two real processes: tensors cut across lanes
// arrive whole and in order; it is chosen over basic by priority.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <signal.h>

#include "../support/scenarios.h"

using namespace actorpipe;
using namespace testing;

TEST_CASE("mpt carries tensors of every size, cut across lanes, intact and in order") {
  EchoPeer peer(1, true);
  // 0 and 1 byte, below one chunk, exactly at chunk boundaries, odd sizes
  // that do not divide by the lane count, and large.
  std::vector<size_t> sizes{0, 1, 1000, 256 * 1024, 512 * 1024 + 1, 768 * 1024, 3 * 1000 * 1000 + 7, 20u << 20};
  std::vector<Storage> sent(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    sent[i].payloads.push_back(pattern(17, int(i)));
    sent[i].tensors.push_back(pattern(sizes[i], int(i) + 3));
    sent[i].tensors.push_back(pattern(sizes[sizes.size() - 1 - i], int(i) + 5));
    peer.pipe->write(messageOver(sent[i], std::to_string(i)), [](const Error& e) { CHECK(!e); });
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    Received r = readSync(*peer.pipe);
    REQUIRE_MESSAGE(!r.error, r.error.what());
    CHECK(r.descriptor.metadata == std::to_string(i));
    CHECK(r.storage.payloads[0] == sent[i].payloads[0]);
    CHECK(r.storage.tensors[0] == sent[i].tensors[0]);
    CHECK(r.storage.tensors[1] == sent[i].tensors[1]);
  }
  PipeInfo info = peer.pipe->info();
  CHECK(info.channels[kCpuDeviceType] == "mpt");
}

TEST_CASE("mpt: a peer killed mid-transfer fails the transfer") {
  killedMidTransfer([](const std::string& name) { return makeContext(name, ContextOptions(), true); },
                    "tcp://127.0.0.1:0", 64u << 20);
}

TEST_CASE("a peer without mpt falls back to basic") {
  Child child = Child::spawn([](Child& self) { return echoServer(self, 1, false); });
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = makeContext("client", ContextOptions(), true);
  auto pipe = context->connect(url);
  Storage s;
  s.tensors.push_back(pattern(1 << 20, 3));
  REQUIRE(!writeSync(*pipe, messageOver(s, "fallback")));
  Received r = readSync(*pipe);
  REQUIRE(!r.error);
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  CHECK(pipe->info().channels[kCpuDeviceType] == "basic");
  pipe.reset();
  context->join();
  CHECK(child.wait() == 0);
}

TEST_CASE("mpt refuses a setup that does not parse, and strangers on its lanes") {
  auto mpt = channel::mpt::create(2, "127.0.0.1");
  Error e;
  CHECK(mpt->connectEndpoint("not-a-setup", e) == nullptr);
  CHECK(e.isOfType<ProtocolError>());
  CHECK(mpt->connectEndpoint("123;127.0.0.1:1", e) == nullptr);  // one lane, we have two
  mpt->join();
}
