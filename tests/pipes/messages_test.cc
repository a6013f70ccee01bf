// Two real processes over loopback: the parent connects, a forked child
// echoes. Every byte that comes back is checked.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "../support/scenarios.h"

using namespace actorpipe;
using namespace testing;

namespace {

void checkEcho(const Storage& sent, const Received& got, const std::string& metadata) {
  REQUIRE_MESSAGE(!got.error, got.error.what());
  CHECK(got.descriptor.metadata == metadata);
  REQUIRE(got.storage.payloads.size() == sent.payloads.size());
  REQUIRE(got.storage.tensors.size() == sent.tensors.size());
  for (size_t i = 0; i < sent.payloads.size(); ++i) {
    CHECK(got.descriptor.payloads[i].metadata == "p" + std::to_string(i));
    CHECK(got.storage.payloads[i] == sent.payloads[i]);
  }
  for (size_t i = 0; i < sent.tensors.size(); ++i) {
    CHECK(got.descriptor.tensors[i].metadata == "t" + std::to_string(i));
    CHECK(got.descriptor.tensors[i].sourceDevice == Device{kCpuDeviceType, 0});
    CHECK(got.storage.tensors[i] == sent.tensors[i]);
  }
}

}  // namespace

TEST_CASE("ping with 4 payloads and 4 tensors comes back intact") {
  EchoPeer peer;
  Storage sent = makeStorage({1, 100, 4096, 70000}, {8, 1000, 65536, 3 << 20}, 7);
  REQUIRE(!writeSync(*peer.pipe, messageOver(sent, "ping")));
  checkEcho(sent, readSync(*peer.pipe), "ping");
}

TEST_CASE("ping-pong twice, callbacks in call order") {
  EchoPeer peer;
  std::mutex mutex;
  std::vector<std::string> events;
  auto note = [&](std::string e) {
    std::lock_guard<std::mutex> g(mutex);
    events.push_back(std::move(e));
  };
  Storage a = makeStorage({10}, {20}, 1);
  Storage b = makeStorage({30}, {40}, 2);
  std::promise<void> done;
  peer.pipe->write(messageOver(a, "first"), [&](const Error& e) { CHECK(!e); note("write1"); });
  peer.pipe->write(messageOver(b, "second"), [&](const Error& e) { CHECK(!e); note("write2"); });
  Storage ra, rb;
  peer.pipe->readDescriptor([&](const Error& e, Descriptor d) {
    REQUIRE(!e);
    note("desc1:" + d.metadata);
    peer.pipe->read(allocate(d, ra), [&](const Error& e) { CHECK(!e); note("read1"); });
  });
  peer.pipe->readDescriptor([&](const Error& e, Descriptor d) {
    REQUIRE(!e);
    note("desc2:" + d.metadata);
    peer.pipe->read(allocate(d, rb), [&](const Error& e) {
      CHECK(!e);
      note("read2");
      done.set_value();
    });
  });
  auto f = done.get_future();
  REQUIRE(ready(f, std::chrono::seconds(20)));
  std::lock_guard<std::mutex> g(mutex);
  std::vector<std::string> writes, reads;
  for (auto& e : events) (e.rfind("write", 0) == 0 ? writes : reads).push_back(e);
  CHECK(writes == std::vector<std::string>{"write1", "write2"});
  CHECK(reads == std::vector<std::string>{"desc1:first", "read1", "desc2:second", "read2"});
  CHECK(ra.payloads[0] == a.payloads[0]);
  CHECK(rb.tensors[0] == b.tensors[0]);
}

TEST_CASE("operations asked from a pipe's callbacks run in the order asked") {
  // On the pipe's loop thread an operation skips the actor's mailbox
  // (PipeCore::postNext): writes and reads asked from callbacks must still
  // go out, complete and come back in the order they were asked.
  EchoPeer peer;
  auto pipe = peer.pipe;
  std::mutex mutex;
  std::vector<std::string> events;
  auto note = [&](std::string what) {
    std::lock_guard<std::mutex> guard(mutex);
    events.push_back(std::move(what));
  };
  std::promise<void> allRead;
  std::atomic<int> reads{0};
  std::function<void()> readOne = [&] {
    pipe->readDescriptor([&](const Error& error, Descriptor descriptor) {
      CHECK_MESSAGE(!error, error.what());
      CHECK(descriptor.payloads.empty());
      note("read " + descriptor.metadata);
      Allocation none;
      pipe->read(none, [&](const Error& readError) {
        CHECK_MESSAGE(!readError, readError.what());
        if (++reads == 3) allRead.set_value();
        else readOne();
      });
    });
  };
  Message m1;
  m1.metadata = "m1";
  pipe->write(m1, [&](const Error& error) {
    CHECK_MESSAGE(!error, error.what());
    note("wrote m1");
    for (const char* name : {"m2", "m3"}) {
      Message next;
      next.metadata = name;
      pipe->write(next, [&, name](const Error& e) {
        CHECK_MESSAGE(!e, e.what());
        note(std::string("wrote ") + name);
      });
    }
    readOne();
  });
  auto done = allRead.get_future();
  REQUIRE(ready(done, 20s));
  std::lock_guard<std::mutex> guard(mutex);
  const std::vector<std::string> expected = {"wrote m1", "wrote m2", "wrote m3", "read m1", "read m2", "read m3"};
  std::vector<std::string> writes, readsSeen;
  for (const auto& e : events) (e.rfind("wrote", 0) == 0 ? writes : readsSeen).push_back(e);
  CHECK(writes == std::vector<std::string>(expected.begin(), expected.begin() + 3));
  CHECK(readsSeen == std::vector<std::string>(expected.begin() + 3, expected.end()));
}

TEST_CASE("a close asked from a callback comes after what that thread asked before, and before what it asks after") {
  // On the loop thread operations skip the actor's mailbox (postNext) while
  // a close goes through it: the order asked must hold anyway. A write asked
  // before the close is sent (or failed by it); one asked after it fails
  // with PipeClosedError and never goes out.
  auto context = makeContext("closer", ContextOptions(), false);
  auto listener = context->listen({"tcp://127.0.0.1:0"});
  auto pipe = context->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  std::promise<Error> before, after;
  Message first;
  first.metadata = "first";
  REQUIRE(!writeSync(*accepted, first));
  pipe->readDescriptor([&](const Error& error, Descriptor) {
    REQUIRE_MESSAGE(!error, error.what());
    Message m;
    m.metadata = "before";
    pipe->write(m, [&](const Error& e) { before.set_value(e); });
    pipe->close();
    m.metadata = "after";
    pipe->write(m, [&](const Error& e) { after.set_value(e); });
  });
  auto a = after.get_future();
  auto b = before.get_future();
  REQUIRE(ready(a, 20s));
  REQUIRE(ready(b, 20s));
  Error afterError = a.get();
  CHECK_MESSAGE(afterError.isOfType<PipeClosedError>(), afterError.what());
  Error beforeError = b.get();
  CHECK_MESSAGE((!beforeError || beforeError.isOfType<PipeClosedError>()), beforeError.what());
  accepted.reset();
  pipe.reset();
  context->join();
}

TEST_CASE("a full message followed by an empty one") {
  EchoPeer peer;
  Storage full = makeStorage({5, 6}, {7, 8}, 3);
  Storage empty;
  REQUIRE(!writeSync(*peer.pipe, messageOver(full, "full")));
  REQUIRE(!writeSync(*peer.pipe, messageOver(empty, "")));
  checkEcho(full, readSync(*peer.pipe), "full");
  Received r = readSync(*peer.pipe);
  REQUIRE(!r.error);
  CHECK(r.descriptor.metadata.empty());
  CHECK(r.descriptor.payloads.empty());
  CHECK(r.descriptor.tensors.empty());
}

TEST_CASE("payloads only, then tensors only") {
  EchoPeer peer;
  Storage payloads = makeStorage({1, 2, 300000}, {}, 4);
  Storage tensors = makeStorage({}, {3, 0, 500000}, 5);
  REQUIRE(!writeSync(*peer.pipe, messageOver(payloads, "payloads")));
  checkEcho(payloads, readSync(*peer.pipe), "payloads");
  REQUIRE(!writeSync(*peer.pipe, messageOver(tensors, "tensors")));
  checkEcho(tensors, readSync(*peer.pipe), "tensors");
}

TEST_CASE("tensors with and without targetDevice") {
  EchoPeer peer;
  Storage s = makeStorage({}, {16, 16}, 6);
  Message m = messageOver(s, "targets");
  m.tensors[0].targetDevice = Device{kCpuDeviceType, 0};
  REQUIRE(!writeSync(*peer.pipe, std::move(m)));
  Received r = readSync(*peer.pipe);
  checkEcho(s, r, "targets");
  REQUIRE(r.descriptor.tensors[0].targetDevice.has_value());
  CHECK(*r.descriptor.tensors[0].targetDevice == Device{kCpuDeviceType, 0});
  CHECK(!r.descriptor.tensors[1].targetDevice.has_value());
}

TEST_CASE("many queued writes against queued reads") {
  EchoPeer peer;
  constexpr int kCount = 200;
  std::vector<Storage> sent;
  for (int i = 0; i < kCount; ++i) sent.push_back(makeStorage({size_t(i % 7) * 100}, {size_t(i) * 37}, i));
  std::atomic<int> writesDone{0};
  std::atomic<int> order{0};
  std::atomic<bool> inOrder{true};
  for (int i = 0; i < kCount; ++i) {
    peer.pipe->write(messageOver(sent[i], std::to_string(i)), [&, i](const Error& e) {
      CHECK(!e);
      if (order.fetch_add(1) != i) inOrder = false;
      writesDone++;
    });
  }
  std::vector<Storage> got(kCount);
  std::promise<void> all;
  std::atomic<int> reads{0};
  for (int i = 0; i < kCount; ++i) {
    peer.pipe->readDescriptor([&, i](const Error& e, Descriptor d) {
      REQUIRE(!e);
      CHECK(d.metadata == std::to_string(i));
      peer.pipe->read(allocate(d, got[i]), [&](const Error& e) {
        CHECK(!e);
        if (++reads == kCount) all.set_value();
      });
    });
  }
  auto f = all.get_future();
  REQUIRE(ready(f, std::chrono::seconds(30)));
  CHECK(writesDone == kCount);
  CHECK(inOrder);
  for (int i = 0; i < kCount; ++i) {
    CHECK(got[i].payloads[0] == sent[i].payloads[0]);
    CHECK(got[i].tensors[0] == sent[i].tensors[0]);
  }
}

TEST_CASE("both sides write at once") {
  // The child writes 50 messages and reads 50 while we do the same.
  constexpr int kCount = 50;
  Child child = Child::spawn([](Child& self) {
    auto context = makeContext("both");
    auto listener = context->listen({"tcp://127.0.0.1:0"});
    self.send(listener->url("tcp"));
    auto pipe = acceptSync(*listener);
    CHILD_CHECK(pipe != nullptr);
    std::vector<Storage> out(kCount);
    std::atomic<int> failures{0};
    for (int i = 0; i < kCount; ++i) {
      out[i].tensors.push_back(pattern(100000, 1000 + i));
      pipe->write(messageOver(out[i], "c" + std::to_string(i)), [&](const Error& e) { if (e) failures++; });
    }
    for (int i = 0; i < kCount; ++i) {
      Received r = readSync(*pipe);
      CHILD_CHECK(!r.error);
      CHILD_CHECK(r.descriptor.metadata == "p" + std::to_string(i));
      CHILD_CHECK(r.storage.tensors[0] == pattern(100000, 2000 + i));
    }
    CHILD_CHECK(failures == 0);
    // Wait for the parent to finish reading before hanging up.
    Received last = readSync(*pipe);
    CHILD_CHECK(last.error);
    return 0;
  });
  std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = makeContext("both-parent");
  auto pipe = context->connect(url);
  std::vector<Storage> out(kCount);
  std::atomic<int> failures{0};
  std::atomic<int> written{0};
  for (int i = 0; i < kCount; ++i) {
    out[i].tensors.push_back(pattern(100000, 2000 + i));
    pipe->write(messageOver(out[i], "p" + std::to_string(i)), [&](const Error& e) {
      if (e) failures++;
      written++;
    });
  }
  for (int i = 0; i < kCount; ++i) {
    Received r = readSync(*pipe);
    REQUIRE_MESSAGE(!r.error, r.error.what());
    CHECK(r.descriptor.metadata == "c" + std::to_string(i));
    CHECK(r.storage.tensors[0] == pattern(100000, 1000 + i));
  }
  // Closing with writes still queued would cancel them: wait for them (the
  // kernel delivers what it holds even after we close).
  for (int i = 0; i < 2000 && written < kCount; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(written == kCount);
  pipe->close();
  CHECK(child.wait() == 0);
  CHECK(failures == 0);
}

TEST_CASE("100 pipes on one context") {
  constexpr int kPipes = 100;
  EchoPeer peer(kPipes);  // its own pipe is the first of the 100
  std::vector<std::shared_ptr<Pipe>> pipes{peer.pipe};
  for (int i = 1; i < kPipes; ++i) pipes.push_back(peer.context->connect(peer.url));
  std::vector<Storage> sent(kPipes), got(kPipes);
  std::atomic<int> done{0};
  std::promise<void> all;
  for (int i = 0; i < kPipes; ++i) {
    sent[i].payloads.push_back(pattern(64 + i, i));
    sent[i].tensors.push_back(pattern(4096 + i, 3 * i));
    pipes[i]->write(messageOver(sent[i], std::to_string(i)), [](const Error& e) { CHECK(!e); });
    Pipe* p = pipes[i].get();
    p->readDescriptor([&, i, p](const Error& e, Descriptor d) {
      REQUIRE_MESSAGE(!e, e.what());
      CHECK(d.metadata == std::to_string(i));
      p->read(allocate(d, got[i]), [&](const Error& e) {
        CHECK(!e);
        if (++done == kPipes) all.set_value();
      });
    });
  }
  auto f = all.get_future();
  REQUIRE(ready(f, std::chrono::seconds(60)));
  for (int i = 0; i < kPipes; ++i) {
    CHECK(got[i].payloads[0] == sent[i].payloads[0]);
    CHECK(got[i].tensors[0] == sent[i].tensors[0]);
  }
  pipes.clear();
}
