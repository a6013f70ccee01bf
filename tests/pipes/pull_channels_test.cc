// cma between processes, xth within one: tensors copied once, straight into
// the reader's memory; and both fall back to basic where they cannot work.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <thread>

#include "../support/scenarios.h"

#include <actorpipe/actors/detail/pipe_core.h>

using namespace actorpipe;
using namespace testing;

namespace {

// Child: listen on shm (and tcp), echo every message of one pipe.
int echoOn(Child& self, const std::shared_ptr<Context>& context) {
  auto listener = context->listen({"shm://", "tcp://127.0.0.1:0"});
  self.send(listener->url("tcp"));
  auto pipe = acceptSync(*listener);
  CHILD_CHECK(pipe != nullptr);
  for (;;) {
    Received r = readSync(*pipe);
    if (r.error) return r.error.isOfType<EOFError>() ? 0 : 7;
    Message m = messageOver(r.storage, r.descriptor.metadata);
    CHILD_CHECK(!writeSync(*pipe, std::move(m)));
  }
}

int fullEcho(Child& self) { return echoOn(self, makeFullContext("echo")); }

// The default backends (cma left out). A poll window of 0: the loop sleeps
// as soon as it finds nothing to do, so every message finds its reader
// asleep and a writer must wake it (shm: ShmConnection::pushWrites).
std::shared_ptr<Context> defaultContext(const std::string& name,
                                        std::chrono::microseconds pollWindow = ContextOptions().pollWindow()) {
  auto context = std::make_shared<Context>(ContextOptions().name(name).pollWindow(pollWindow));
  registerDefaultBackends(*context);
  return context;
}

int defaultEcho(Child& self) { return echoOn(self, defaultContext("echo")); }
int sleepyEcho(Child& self) { return echoOn(self, defaultContext("echo", std::chrono::microseconds(0))); }

// One message per size, each with a payload and two tensors (sizes[i] and
// sizes[n - 1 - i] bytes), all written at once; every echo checked.
void echoSizes(Pipe& pipe, const std::vector<size_t>& sizes) {
  const size_t n = sizes.size();
  std::vector<Storage> sent(n);
  for (size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i);
    sent[i].payloads.push_back(pattern(100 + i, k));
    sent[i].tensors.push_back(pattern(sizes[i], k + 1));
    sent[i].tensors.push_back(pattern(sizes[n - 1 - i], k + 2));
    pipe.write(messageOver(sent[i], std::to_string(i)), [](const Error& e) { CHECK(!e); });
  }
  for (size_t i = 0; i < n; ++i) {
    Received r = readSync(pipe);
    REQUIRE_MESSAGE(!r.error, r.error.what());
    CHECK(r.descriptor.metadata == std::to_string(i));
    CHECK(r.storage.payloads[0] == sent[i].payloads[0]);
    CHECK(r.storage.tensors[0] == sent[i].tensors[0]);
    CHECK(r.storage.tensors[1] == sent[i].tensors[1]);
  }
}

std::string joined(const std::vector<std::string>& notes) {
  std::string s;
  for (const auto& n : notes) s += n + "; ";
  return s;
}

// Two contexts of this process, a pipe between them (xth's case).
struct InProcessPair {
  std::shared_ptr<Context> server = makeFullContext("server");
  std::shared_ptr<Context> client = makeFullContext("client");
  std::shared_ptr<Listener> listener = server->listen({"shm://", "tcp://127.0.0.1:0"});
  std::shared_ptr<Pipe> pipe = client->connect(listener->url("tcp"));
  std::shared_ptr<Pipe> accepted = acceptSync(*listener);
};

// Echoes a 128 MiB tensor over `pipe` and returns how often the pipe
// counted the peer's bytes arriving meanwhile (PipeCore::arrivals).
uint64_t arrivalsOfLargeEcho(Pipe& pipe) {
  Storage s;
  s.tensors.push_back(pattern(size_t{128} << 20, 5));
  const uint64_t before = pipe.core()->arrivals();
  pipe.write(messageOver(s, "large"), [](const Error& e) { CHECK(!e); });
  Received r = readSync(pipe);
  CHECK_MESSAGE(!r.error, r.error.what());  // not REQUIRE: an echo thread may wait to be joined
  if (r.error) return 0;
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  return pipe.core()->arrivals() - before;
}

}  // namespace

TEST_CASE("cma and xth count a large tensor's bytes as they copy them, piece by piece") {
  // A copy of gigabytes takes seconds, and nothing else arrives on the pipe
  // meanwhile: the remote layer's heartbeat takes the count moving for the
  // peer speaking. A 128 MiB tensor is 8 pieces of 16 MiB (or more, where
  // the sender helps: each of its 1 MiB pieces counts); the connection
  // counts only a few reads of its own.
  SUBCASE("cma") {
    Child child = Child::spawn(fullEcho);
    std::string url = child.receive();
    REQUIRE(!url.empty());
    auto context = makeFullContext("client");
    auto pipe = context->connect(url);
    const uint64_t counted = arrivalsOfLargeEcho(*pipe);
    MESSAGE("cma: " << counted << " arrivals for 128 MiB");
    CHECK(counted >= 8);
    CHECK(pipe->info().channels["cpu"] == "cma");
    pipe.reset();
    context->join();
    CHECK(child.wait() == 0);
  }
  SUBCASE("xth") {
    InProcessPair pair;
    REQUIRE(pair.accepted != nullptr);
    std::thread echo([&pair] {
      Received r = readSync(*pair.accepted);
      CHECK_MESSAGE(!r.error, r.error.what());
      if (!r.error) CHECK(!writeSync(*pair.accepted, messageOver(r.storage, r.descriptor.metadata)));
    });
    const uint64_t counted = arrivalsOfLargeEcho(*pair.pipe);
    echo.join();
    MESSAGE("xth: " << counted << " arrivals for 128 MiB");
    CHECK(counted >= 8);
    CHECK(pair.pipe->info().channels["cpu"] == "xth");
  }
}

TEST_CASE("cma: same-host peers move tensors with process_vm_readv") {
  Child child = Child::spawn(fullEcho);
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = makeFullContext("client");
  auto pipe = context->connect(url);
  echoSizes(*pipe, {1, 1024, 65536, 1 << 20, 3 * 1000 * 1000 + 1, 20u << 20});
  PipeInfo info = pipe->info();
  CHECK(info.transport == "shm");
  CHECK(info.channels["cpu"] == "cma");
  CHECK(joined(info.notes).find("channel xth: out of the peer's reach") != std::string::npos);
  pipe.reset();
  context->join();
  CHECK(child.wait() == 0);
}

TEST_CASE("cma: a reader that exits right after reading does not fail the writer") {
  // TensorPipe's cma tells the writer after the reader's callback, so a
  // reader that exits at once makes the last write fail. Ours acknowledges
  // first.
  for (int round = 0; round < 5; ++round) {
    Child child = Child::spawn([](Child& self) {
      auto context = makeFullContext("reader");
      auto listener = context->listen({"shm://"});
      self.send(listener->url("shm"));
      auto pipe = acceptSync(*listener);
      CHILD_CHECK(pipe != nullptr);
      Received r = readSync(*pipe);
      CHILD_CHECK(!r.error);
      CHILD_CHECK(r.storage.tensors[0] == pattern(4 << 20, 77));
      ::_exit(0);  // at once, no goodbye
      return 0;
    });
    std::string url = child.receive();
    REQUIRE(!url.empty());
    auto context = makeFullContext("writer");
    auto pipe = context->connect(url);
    Storage s;
    s.tensors.push_back(pattern(4 << 20, 77));
    Error e = writeSync(*pipe, messageOver(s, "last"));
    CHECK_MESSAGE(!e, e.what());
    CHECK(child.wait() == 0);
    CHECK(pipe->info().channels["cpu"] == "cma");
  }
}

TEST_CASE("cma: a reader killed before it reads fails the write") {
  killedMidTransfer(makeFullContext, "shm://", 1u << 20);
}

TEST_CASE("cma refused (another user) falls back to basic") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to run a peer as another user");
    return;
  }
  Child child = Child::spawn([](Child& self) {
    CHILD_CHECK(::setgid(65534) == 0 && ::setuid(65534) == 0);  // nobody
    return fullEcho(self);
  });
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = makeFullContext("root");
  auto pipe = context->connect(url);
  Storage s;
  s.tensors.push_back(pattern(2 << 20, 9));
  REQUIRE(!writeSync(*pipe, messageOver(s, "hello nobody")));
  Received r = readSync(*pipe);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  PipeInfo info = pipe->info();
  CHECK(info.channels["cpu"] == "basic");
  CHECK(joined(info.notes).find("channel cma: ") != std::string::npos);
  MESSAGE("notes: " << joined(info.notes));
  pipe.reset();
  context->join();
  CHECK(child.wait() == 0);
}

TEST_CASE("xth: two contexts of one process copy tensors directly") {
  InProcessPair pair;
  REQUIRE(pair.accepted != nullptr);
  auto& pipe = pair.pipe;
  auto& accepted = pair.accepted;
  for (size_t size : {size_t(1), size_t(1024), size_t(16) << 20}) {
    Storage s;
    s.tensors.push_back(pattern(size, 3));
    s.payloads.push_back(pattern(10, 4));
    // A pulled tensor's write completes when the reader has copied it: read
    // while the write is pending.
    std::promise<Error> written;
    pipe->write(messageOver(s, "x"), [&](const Error& e) { written.set_value(e); });
    Received r = readSync(*accepted);
    REQUIRE_MESSAGE(!r.error, r.error.what());
    auto w = written.get_future();
    REQUIRE(ready(w, std::chrono::seconds(10)));
    CHECK(!w.get());
    CHECK(r.storage.tensors[0] == s.tensors[0]);
    CHECK(r.storage.payloads[0] == s.payloads[0]);
  }
  CHECK(pipe->info().channels["cpu"] == "xth");
  CHECK(accepted->info().channels["cpu"] == "xth");
  // Both ways, many at once.
  std::vector<Storage> back(50);
  for (int i = 0; i < 50; ++i) {
    back[i].tensors.push_back(pattern(size_t(i) * 997, i));
    accepted->write(messageOver(back[i], std::to_string(i)), [](const Error& e) { CHECK(!e); });
  }
  for (int i = 0; i < 50; ++i) {
    Received r = readSync(*pipe);
    REQUIRE(!r.error);
    CHECK(r.descriptor.metadata == std::to_string(i));
    CHECK(r.storage.tensors[0] == back[i].tensors[0]);
  }
}

TEST_CASE("pull descriptors that do not parse or do not fit are protocol errors") {
  auto cma = channel::cma::create();
  std::string setup;
  Error e;
  auto endpoint = cma->acceptEndpoint(setup, e);
  REQUIRE(endpoint != nullptr);
  std::vector<uint8_t> buffer(16);
  std::promise<Error> bad, wrongSize;
  endpoint->recv("nonsense", buffer.data(), buffer.size(), [&](const Error& e) { bad.set_value(e); });
  endpoint->recv("1:99:0:0:0", buffer.data(), buffer.size(), [&](const Error& e) { wrongSize.set_value(e); });
  CHECK(bad.get_future().get().isOfType<ProtocolError>());
  CHECK(wrongSize.get_future().get().isOfType<ProtocolError>());
  endpoint->close(ACTORPIPE_ERROR(PipeClosedError));
}

// The default backends: two processes of one host move to shm and pick
// basic (its two copies overlap, shm/ring.h; cma is asked for explicitly).
// Tensors from 1 B to 20 MiB at odd sizes cross both ways intact, through
// each of the ring's ways to copy (memcpy; its own loop from 256 KiB;
// streaming stores from 8 MiB).
TEST_CASE("default backends: same-host peers pick shm and basic, and large tensors arrive intact") {
  Child child = Child::spawn(defaultEcho);
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = defaultContext("client");
  auto pipe = context->connect(url);
  echoSizes(*pipe, {1, 65537, (256u << 10) + 1, (8u << 20) + 3, (20u << 20) + 5});
  PipeInfo info = pipe->info();
  CHECK(info.transport == "shm");
  CHECK(info.channels["cpu"] == "basic");
  CHECK(joined(info.notes).find("channel cma") == std::string::npos);
  pipe.reset();
  context->join();
  CHECK(child.wait() == 0);
}

// The same with both loops sleeping whenever idle: each large tensor's
// first step wakes the reader, and what follows must still arrive whole
// (a lost wake-up would hang this test until its timeout).
TEST_CASE("default backends: readers that sleep between messages get large tensors whole") {
  Child child = Child::spawn(sleepyEcho);
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = defaultContext("client", std::chrono::microseconds(0));
  auto pipe = context->connect(url);
  for (int round = 0; round < 3; ++round) {
    echoSizes(*pipe, {(64u << 10) + 1, (1u << 20) + 7, (4u << 20) + 3});
  }
  CHECK(pipe->info().channels["cpu"] == "basic");
  pipe.reset();
  context->join();
  CHECK(child.wait() == 0);
}
