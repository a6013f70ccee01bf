// Channels across nodes (actors/remote/channel.h): one node owns a channel,
// others write, read and close it; the open -> closed -> drained semantics
// hold across nodes, a close cascades through stages on three processes,
// and a lost owner ends blocked operations at once.
#include <signal.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "../support/harness.h"
#include "remote_support.h"

#include <actorpipe/actors/dataflow/dag.h>
#include <actorpipe/actors/remote/channel.h>

using namespace remote_test;
using actorpipe::dataflow::Channel;
using actorpipe::dataflow::Status;
using actorpipe::remote::ChannelActor;
using actorpipe::remote::RemoteChannel;
using testing::Child;

namespace {

std::string render(caf::actor_system& system, const caf::error& error) {
  return error ? system.render(error) : std::string("no error");
}

// Serves until the parent sends leave_atom to its "leaver".
void serveUntilLeft(TestNode& node) {
  auto left = std::make_shared<std::promise<void>>();
  auto leaver = node.system().spawn([left](caf::event_based_actor*) -> caf::behavior {
    return {[left](leave_atom) { left->set_value(); }};
  });
  node.node().publish(leaver, "leaver");
  left->get_future().wait();
}

// The child publishes its "leaver" only after it closed its channel, so
// a reader that saw DRAINED may ask before it is there: ask again (a
// sanitizer build on 2 CPUs lost this race, and the child then waited for
// ever).
void tellToLeave(TestNode& node, const std::string& url) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto leaver = node.node().remoteActor(url, "leaver");
    if (leaver) {
      caf::anon_send(*leaver, leave_atom::value);
      return;
    }
    if (!actorpipe::remote::isError(leaver.error(), RemoteError::kNoSuchActor) ||
        std::chrono::steady_clock::now() > deadline) {
      FAIL_CHECK("no leaver at " << url << ": " << node.system().render(leaver.error()));
      return;
    }
    std::this_thread::sleep_for(20ms);
  }
}

}  // namespace

TEST_CASE("a channel written and read from two other nodes: order, close, drain") {
  TestNode owner, writerNode, readerNode;
  Channel<int32_t> numbers(4);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), numbers, "numbers"));
  auto writer = RemoteChannel<int32_t>::open(writerNode.node(), owner.node().url("tcp"), "numbers");
  auto reader = RemoteChannel<int32_t>::open(readerNode.node(), owner.node().url("shm"), "numbers");
  REQUIRE(writer);
  REQUIRE(reader);
  constexpr int32_t kCount = 500;
  std::thread writing([&] {
    for (int32_t i = 0; i < kCount; ++i) CHECK(writer->write(i) == Status::kOpen);
    CHECK(writer->close() != Status::kOpen);
  });
  std::vector<int32_t> got;
  size_t mostQueued = 0;
  for (;;) {
    mostQueued = std::max(mostQueued, numbers.size());
    auto read = reader->read();
    if (!read) {
      CHECK(read.status == Status::kDrained);
      break;
    }
    got.push_back(*read.item);
  }
  writing.join();
  REQUIRE(got.size() == size_t(kCount));
  for (int32_t i = 0; i < kCount; ++i) CHECK(got[size_t(i)] == i);
  CHECK(mostQueued <= 4);  // the remote writer waited for room
  // Closed and drained, for everyone; a normal end is not an error.
  CHECK(writer->write(7) == Status::kDrained);
  CHECK(reader->read().status == Status::kDrained);
  CHECK(reader->status() == Status::kDrained);
  CHECK(numbers.status() == Status::kDrained);
  CHECK(!writer->error());
  CHECK(!reader->error());
}

TEST_CASE("non-blocking operations, a close with items left, Tensors arrive as Tensors") {
  TestNode owner, client;
  Channel<Tensor> tensors(2);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), tensors, "tensors"));
  auto remote = RemoteChannel<Tensor>::open(client.node(), owner.node().url("tcp"), "tensors");
  REQUIRE(remote);
  CHECK(remote->tryRead().status == Status::kEmpty);
  auto a = Tensor::zeros({3, 4}, DType::kFloat32);
  for (int i = 0; i < 12; ++i) a.data<float>()[i] = float(i);
  auto b = Tensor::zeros({1 << 20}, DType::kInt64);  // 8 MiB
  b.data<int64_t>()[(1 << 20) - 1] = 42;
  CHECK(remote->tryWrite(a) == Status::kOpen);
  CHECK(remote->tryWrite(b) == Status::kOpen);
  CHECK(remote->tryWrite(a) == Status::kFull);
  CHECK(remote->status() == Status::kOpen);
  CHECK(remote->close() == Status::kClosed);  // closed, two items left
  CHECK(remote->tryWrite(a) == Status::kClosed);
  auto first = remote->read();
  REQUIRE(first);
  CHECK(first.status == Status::kClosed);
  CHECK(first.item->dtype() == DType::kFloat32);
  CHECK(first.item->shape() == a.shape());
  CHECK(sumOf(*first.item) == 66.0);
  CHECK(!first.item->sharesStorageWith(a));  // it crossed a pipe
  auto second = remote->tryRead();
  REQUIRE(second);
  CHECK(second.item->numel() == (1 << 20));
  CHECK(second.item->data<int64_t>()[(1 << 20) - 1] == 42);
  CHECK(remote->tryRead().status == Status::kDrained);
}

// A channel's owner serves every node: a peer's actor that links to it and
// fails must not end it (CAF's default exit handler would), nor may a
// hand-made peer's LINK and DOWN, nor an error sent to it as a message
// (CAF's default error handler would).
TEST_CASE("a peer's actor linked to the owner fails, or sends it an error: the channel serves on") {
  TestNode owner, client;
  Channel<int32_t> channel(4);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), channel, "numbers"));
  auto remote = RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "numbers");
  REQUIRE(remote);
  SUBCASE("linked, then failed") { linkThenFail(client, remote->owner()); }
  SUBCASE("an error sent as a message") {
    // As CAF answers a message an actor did not expect (a `send` where a
    // `request` was meant); by CAF's default an actor sent an error that
    // is not an answer ends with it. (An exit_msg sent as a message is
    // refused by the link: remote_units_test.)
    caf::scoped_actor self{client.system()};
    self->send(caf::actor_cast<caf::actor>(remote->owner()), caf::make_error(caf::sec::unexpected_message));
  }
  CHECK(outlives(client, remote->owner(), 1000ms));
  CHECK(remote->write(int32_t(3)) == Status::kOpen);
  auto read = remote->read();
  REQUIRE(read);
  CHECK(*read.item == 3);
  CHECK(!remote->error());
}

TEST_CASE("a peer's unexpected messages to a channel's owner are logged in a bounded number of lines") {
  TestNode owner, client;
  Channel<int32_t> channel(4);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), channel, "numbers"));
  auto remote = RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "numbers");
  REQUIRE(remote);
  testing::LogLines warnings;
  // The owner has parked nothing yet: its guard is there from the start.
  caf::scoped_actor self{client.system()};
  auto target = caf::actor_cast<caf::actor>(remote->owner());
  for (int i = 0; i < 2000; ++i)
    self->send(target, std::string("flood"));
  // One sender's messages arrive in order: by this answer, all were seen.
  caf::error refused;
  self->request(target, 10s, std::string("last")).receive([](const caf::message&) {},
                                                          [&](caf::error& error) { refused = error; });
  CHECK(refused == caf::sec::unexpected_message);
  // 2001 messages: the first 8, then the 16th, 32nd, ..., 1024th.
  CHECK(warnings.count("unexpected message dropped") == 15);
  CHECK(warnings.count("1024 so far") == 1);
  CHECK(remote->write(int32_t(3)) == Status::kOpen);
  auto read = remote->read();
  REQUIRE(read);
  CHECK(*read.item == 3);
}

TEST_CASE("an actor reads a remote channel without blocking: it requests the owner") {
  TestNode owner, client;
  Channel<int32_t> numbers(8);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), numbers, "numbers"));
  auto remote = RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "numbers");
  REQUIRE(remote);
  auto done = std::make_shared<std::promise<std::vector<int32_t>>>();
  // Each read is a request whose answer comes when an item does: the
  // actor holds no thread meanwhile.
  auto reader = client.system().spawn([done, from = remote->owner()](caf::event_based_actor* self) {
    auto got = std::make_shared<std::vector<int32_t>>();
    auto next = std::make_shared<std::function<void()>>();
    *next = [=] {
      self->request(from, caf::infinite, actorpipe::remote::channel_read_atom::value)
          .then([=](uint8_t status, int32_t item) {
            if (static_cast<Status>(status) == Status::kDrained) {
              done->set_value(*got);
              *next = nullptr;
              return;
            }
            got->push_back(item);
            (*next)();
          });
    };
    (*next)();
  });
  for (int32_t i = 0; i < 100; ++i) CHECK(numbers.write(i) == Status::kOpen);
  numbers.close();
  auto result = done->get_future();
  REQUIRE(result.wait_for(10s) == std::future_status::ready);
  auto got = result.get();
  REQUIRE(got.size() == 100);
  for (int32_t i = 0; i < 100; ++i) CHECK(got[size_t(i)] == i);
  caf::anon_send_exit(reader, caf::exit_reason::user_shutdown);
}

TEST_CASE("a channel of another type, or none at all, is refused at open") {
  TestNode owner, client;
  Channel<Tensor> tensors;
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), tensors, "tensors"));
  auto wrong = RemoteChannel<int32_t>::open(client.node(), owner.node().url("tcp"), "tensors");
  REQUIRE(!wrong);
  CHECK(actorpipe::remote::isError(wrong.error(), RemoteError::kBadInterface));
  auto none = RemoteChannel<Tensor>::open(client.node(), owner.node().url("tcp"), "nothing");
  REQUIRE(!none);
  CHECK(actorpipe::remote::isError(none.error(), RemoteError::kNoSuchActor));
  // An actor published under the name is not a channel either.
  owner.node().publish(owner.system().spawn(summer), "channel:summer");
  auto actor = RemoteChannel<Tensor>::open(client.node(), owner.node().url("tcp"), "summer");
  REQUIRE(!actor);
  CHECK(actorpipe::remote::isError(actor.error(), RemoteError::kBadInterface));
}

TEST_CASE("an owner answering what no channel answers: the channel is gone, with the reason") {
  // A hostile owner with the right interface and a status byte that is
  // no Status.
  TestNode owner, client;
  auto liar = owner.system().spawn([]() -> ChannelActor<int32_t>::behavior_type {
    return {
        [](actorpipe::remote::channel_read_atom) { return std::make_tuple(uint8_t(200), int32_t(1)); },
        [](actorpipe::remote::channel_try_read_atom) { return std::make_tuple(uint8_t(0), int32_t(1)); },
        [](actorpipe::remote::channel_write_atom, int32_t) { return uint8_t(99); },
        [](actorpipe::remote::channel_try_write_atom, int32_t) { return uint8_t(0); },
        [](actorpipe::remote::channel_close_atom) { return uint8_t(2); },
        [](actorpipe::remote::channel_status_atom) { return uint8_t(0); },
    };
  });
  REQUIRE(!owner.node().publish(liar, "channel:liar"));
  auto remote = RemoteChannel<int32_t>::open(client.node(), owner.node().url("tcp"), "liar");
  REQUIRE(remote);
  CHECK(remote->status() == Status::kOpen);
  auto read = remote->read();
  CHECK(!read);
  CHECK(read.status == Status::kDrained);
  CHECK(render(client.system(), remote->error()).find("status 200") != std::string::npos);
  // Gone for good: nothing is asked any more.
  CHECK(remote->tryRead().status == Status::kDrained);
  CHECK(remote->write(1) == Status::kClosed);
}

TEST_CASE("the owner killed: a blocked reader and a blocked writer return at once") {
  Child child = Child::spawn(
      [](Child& self) {
        TestNode node;
        Channel<int32_t> full(1), empty;
        full.write(1);
        CHILD_CHECK(!actorpipe::remote::exportChannel(node.node(), full, "full"));
        CHILD_CHECK(!actorpipe::remote::exportChannel(node.node(), empty, "empty"));
        self.send(node.node().url("tcp"));
        serveUntilLeft(node);
        return 0;
      },
      std::chrono::seconds(60));
  std::string url = child.receive();
  REQUIRE(!url.empty());
  NodeOptions slow = TestNode::quick();
  slow.heartbeatTimeout = 30s;  // so only the socket's end can tell
  TestNode client(slow);
  auto full = RemoteChannel<int32_t>::open(client.node(), url, "full");
  auto empty = RemoteChannel<int32_t>::open(client.node(), url, "empty");
  REQUIRE(full);
  REQUIRE(empty);
  auto wrote = std::async(std::launch::async, [&] { return full->write(2); });
  auto read = std::async(std::launch::async, [&] { return empty->read(); });
  CHECK(wrote.wait_for(300ms) == std::future_status::timeout);  // both wait
  CHECK(read.wait_for(0ms) == std::future_status::timeout);
  auto killed = std::chrono::steady_clock::now();
  child.kill(SIGKILL);
  REQUIRE(wrote.wait_for(10s) == std::future_status::ready);
  REQUIRE(read.wait_for(10s) == std::future_status::ready);
  auto noticed = std::chrono::steady_clock::now() - killed;
  CHECK(wrote.get() == Status::kClosed);
  CHECK(read.get().status == Status::kDrained);
  CHECK(actorpipe::remote::isError(full->error(), RemoteError::kNodeLost));
  CHECK(actorpipe::remote::isError(empty->error(), RemoteError::kNodeLost));
  CHECK(noticed < 5s);
  MESSAGE("owner's death ended the blocked calls after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(noticed).count() << " ms");
  child.wait();
}

// A read parks at the owner for its reader. A reader whose process is
// killed while its read is parked must not take the next item with it: the
// answer would go nowhere, and the item be lost to every other reader.
TEST_CASE("a reader killed while its read is parked takes no item with it") {
  TestNode owner;
  Channel<int32_t> channel;
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), channel, "numbers"));
  std::string url = owner.node().url("tcp");
  Child child = Child::spawn(
      [url](Child& self) {
        TestNode node;
        auto remote = RemoteChannel<int32_t>::open(node.node(), url, "numbers");
        CHILD_CHECK(remote);
        self.send("reading");
        (void)remote->read();  // parks at the owner until the kill
        return 0;
      },
      std::chrono::seconds(60));
  REQUIRE(child.receive() == "reading");
  std::this_thread::sleep_for(300ms);  // its read reached the owner and parked
  child.kill(SIGKILL);
  child.wait();
  // The owner's node notices the loss (the socket's end), then the owner
  // hears its reader's DOWN.
  for (int i = 0; i < 500 && !owner.node().peers().empty(); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(owner.node().peers().empty());
  std::this_thread::sleep_for(TestNode::kPromptly / 2);  // instrumented and loaded: longer
  REQUIRE(channel.write(int32_t(7)) == Status::kOpen);
  std::optional<int32_t> got;
  for (int i = 0; i < 200 && !got; ++i) {
    auto read = channel.tryRead();
    if (read) got = *read.item;
    else std::this_thread::sleep_for(10ms);
  }
  REQUIRE(got);  // still here for the readers that are left
  CHECK(*got == 7);
}

TEST_CASE("a close cascades through stages on three processes") {
  // source (process A) -> "raw" on A -> doubler (process B) -> "doubled" on
  // B -> sink (this process). Closing the source's channel is the only
  // shutdown signal.
  constexpr int32_t kItems = 200;
  Child source = Child::spawn(
      [](Child& self) {
        TestNode node;
        Channel<Tensor> raw(8);
        CHILD_CHECK(!actorpipe::remote::exportChannel(node.node(), raw, "raw"));
        self.send(node.node().url("tcp"));
        for (int32_t i = 0; i < kItems; ++i) {
          auto t = Tensor::zeros({16}, DType::kInt32);
          for (int j = 0; j < 16; ++j) t.data<int32_t>()[j] = i;
          CHILD_CHECK(raw.write(std::move(t)) == Status::kOpen);
        }
        raw.close();
        serveUntilLeft(node);
        return 0;
      },
      std::chrono::seconds(90));
  std::string rawUrl = source.receive();
  REQUIRE(!rawUrl.empty());
  Child doubler = Child::spawn(
      [rawUrl](Child& self) {
        TestNode node;
        Channel<Tensor> doubled(8);
        CHILD_CHECK(!actorpipe::remote::exportChannel(node.node(), doubled, "doubled"));
        auto raw = RemoteChannel<Tensor>::open(node.node(), rawUrl, "raw");
        CHILD_CHECK(raw);
        self.send(node.node().url("tcp"));
        for (;;) {
          auto read = raw->read();
          if (!read) {
            CHILD_CHECK(read.status == Status::kDrained);
            CHILD_CHECK(!raw->error());
            break;
          }
          Tensor t = *read.item;
          for (int j = 0; j < 16; ++j) t.data<int32_t>()[j] *= 2;
          CHILD_CHECK(doubled.write(std::move(t)) == Status::kOpen);
        }
        doubled.close();  // the cascade: drained upstream, closed here
        serveUntilLeft(node);
        return 0;
      },
      std::chrono::seconds(90));
  std::string doubledUrl = doubler.receive();
  REQUIRE(!doubledUrl.empty());
  TestNode sink;
  auto doubled = RemoteChannel<Tensor>::open(sink.node(), doubledUrl, "doubled");
  REQUIRE(doubled);
  int32_t expected = 0;
  int64_t total = 0;
  for (;;) {
    auto read = doubled->read();
    if (!read) {
      CHECK(read.status == Status::kDrained);
      break;
    }
    CHECK(read.item->data<int32_t>()[0] == 2 * expected);
    total += static_cast<int64_t>(sumOf(*read.item));
    ++expected;
  }
  CHECK(!doubled->error());
  CHECK(expected == kItems);
  CHECK(total == int64_t(16) * 2 * (kItems - 1) * kItems / 2);
  tellToLeave(sink, doubledUrl);
  tellToLeave(sink, rawUrl);
  CHECK(doubler.wait() == 0);
  CHECK(source.wait() == 0);
}

TEST_CASE("a remote channel as a Dag's input: in order, the owner's close ends the Dag") {
  TestNode owner, node;
  Channel<int64_t> source(8);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), source, "numbers"));
  auto remote = RemoteChannel<int64_t>::open(node.node(), owner.node().url("shm"), "numbers");
  REQUIRE(remote);
  auto ended = std::make_shared<std::promise<caf::error>>();
  auto input = actorpipe::remote::importChannel(node.node(), *remote, 4,
                                                [ended](caf::error e) { ended->set_value(e); });
  actorpipe::dataflow::Dag dag(node.system());
  auto doubled = dag.stage(input, [](int64_t x) { return 2 * x; });
  std::mutex mutex;
  std::vector<int64_t> seen;
  dag.sink(doubled, [&](int64_t x) {
    std::lock_guard<std::mutex> guard(mutex);
    seen.push_back(x);
  });
  constexpr int64_t kItems = 300;
  std::thread writer([&] {
    for (int64_t i = 0; i < kItems; ++i) REQUIRE(source.write(i) == Status::kOpen);
    source.close();  // the only way this Dag ends
  });
  dag.wait();
  writer.join();
  std::lock_guard<std::mutex> guard(mutex);
  REQUIRE(seen.size() == size_t(kItems));
  for (int64_t i = 0; i < kItems; ++i) CHECK(seen[size_t(i)] == 2 * i);
  auto reason = ended->get_future();
  REQUIRE(reason.wait_for(10s) == std::future_status::ready);
  CHECK(!reason.get());
}

TEST_CASE("importChannel: the owner's node gone closes the local channel, with the reason") {
  TestNode node;
  auto owner = std::make_unique<TestNode>();
  Channel<int64_t> source;
  REQUIRE(!actorpipe::remote::exportChannel(owner->node(), source, "numbers"));
  auto remote = RemoteChannel<int64_t>::open(node.node(), owner->node().url("tcp"), "numbers");
  REQUIRE(remote);
  auto ended = std::make_shared<std::promise<caf::error>>();
  auto local = actorpipe::remote::importChannel(node.node(), *remote, 2,
                                                [ended](caf::error e) { ended->set_value(e); });
  REQUIRE(source.write(int64_t(5)) == Status::kOpen);
  auto first = local.read();
  REQUIRE(first);
  CHECK(*first.item == 5);
  owner->leave();
  CHECK(local.read().status == Status::kDrained);
  auto reason = ended->get_future();
  REQUIRE(reason.wait_for(10s) == std::future_status::ready);
  // The node's reason: it left (it closes only once its BYE is read here).
  auto error = reason.get();
  CAPTURE(node.system().render(error));
  CHECK(actorpipe::remote::isError(error, RemoteError::kNodeLeft));
}

// onEnd is the user's code, run by the reading actor importChannel spawned.
// One that throws is logged and ends nothing else; the reader's closure
// (which holds itself until the end) is freed all the same.
TEST_CASE("importChannel: an onEnd that throws is logged, and the reader leaks nothing") {
  testing::LogLines lines;
  TestNode owner, node;
  Channel<int64_t> source;
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), source, "numbers"));
  auto remote = RemoteChannel<int64_t>::open(node.node(), owner.node().url("shm"), "numbers");
  REQUIRE(remote);
  auto token = std::make_shared<int>(0);  // held by onEnd alone
  std::weak_ptr<int> watch = token;
  auto ran = std::make_shared<std::atomic<bool>>(false);
  {
    auto local = actorpipe::remote::importChannel(node.node(), *remote, 2,
                                                  [token, ran](caf::error) {
                                                    ran->store(true);
                                                    throw 42;  // not even an exception
                                                  });
    token.reset();
    REQUIRE(source.write(int64_t(7)) == Status::kOpen);
    source.close();
    auto first = local.read();
    REQUIRE(first);
    CHECK(*first.item == 7);
    CHECK(local.read().status == Status::kDrained);
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((!ran->load() || !watch.expired() || lines.count("importChannel's onEnd") == 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(ran->load());
  CHECK(watch.expired());  // the closure that held onEnd is gone
  CHECK(lines.count("an exception escaped an importChannel's onEnd") == 1);
  // The node still works: a second import of the same channel ends cleanly.
  auto again = RemoteChannel<int64_t>::open(node.node(), owner.node().url("shm"), "numbers");
  REQUIRE(again);
  auto ended = std::make_shared<std::promise<caf::error>>();
  auto local = actorpipe::remote::importChannel(node.node(), *again, 2,
                                                [ended](caf::error e) { ended->set_value(e); });
  CHECK(local.read().status == Status::kDrained);
  auto reason = ended->get_future();
  REQUIRE(reason.wait_for(10s) == std::future_status::ready);
  CHECK(!reason.get());
}
