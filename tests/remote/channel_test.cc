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
#include <tuple>

#include "../support/harness.h"
#include "attacker.h"
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


using park_read_atom = caf::atom_constant<caf::atom("parkread")>;
using park_write_atom = caf::atom_constant<caf::atom("parkwrite")>;

// What one parker's requests were answered in the end.
struct ParkedAnswers {
  std::mutex mutex;
  std::vector<int32_t> items;     // reads answered with an item
  std::vector<uint8_t> statuses;  // writes, and reads answered without an item
  std::vector<caf::error> errors; // anything but "one too many"
};

// Sends `request` to `owner` for `self` and then a status request, which
// the owner answers after it (it takes one sender's messages in order):
// if `request` was not refused as one too many by then, it waits there
// and `promise` gets true; if it was, it is asked again.
void parkAt(caf::event_based_actor* self, caf::actor owner, std::shared_ptr<ParkedAnswers> answers,
            caf::message request, caf::response_promise promise) {
  auto refused = std::make_shared<bool>(false);
  auto onError = [answers, refused](caf::error& error) {
    std::lock_guard<std::mutex> guard(answers->mutex);
    if (actorpipe::remote::isError(error, RemoteError::kTooManyRequests)) *refused = true;
    else answers->errors.push_back(error);
  };
  if (request.match_elements<actorpipe::remote::channel_read_atom>()) {
    self->request(owner, caf::infinite, request).then([answers](uint8_t status, int32_t item) {
      std::lock_guard<std::mutex> guard(answers->mutex);
      if (status <= static_cast<uint8_t>(Status::kClosed)) answers->items.push_back(item);
      else answers->statuses.push_back(status);
    }, onError);
  } else {
    self->request(owner, caf::infinite, request).then([answers](uint8_t status) {
      std::lock_guard<std::mutex> guard(answers->mutex);
      answers->statuses.push_back(status);
    }, onError);
  }
  self->request(owner, caf::infinite, actorpipe::remote::channel_status_atom::value)
      .then([=](uint8_t) mutable {
        if (!*refused) promise.deliver(true);
        else parkAt(self, owner, answers, request, promise);
      }, [promise](caf::error&) mutable { promise.deliver(false); });
}

// An actor whose reads and writes wait at `owner` (a channel's owner on
// another node): park() returns once one waits there.
caf::behavior parker(caf::event_based_actor* self, caf::actor owner,
                     std::shared_ptr<ParkedAnswers> answers) {
  return {
      [=](park_read_atom) {
        auto promise = self->make_response_promise();
        parkAt(self, owner, answers, caf::make_message(actorpipe::remote::channel_read_atom::value), promise);
        return promise;
      },
      [=](park_write_atom, int32_t item) {
        auto promise = self->make_response_promise();
        parkAt(self, owner, answers,
               caf::make_message(actorpipe::remote::channel_write_atom::value, item), promise);
        return promise;
      },
  };
}

template <class... Ts>
bool park(TestNode& node, const caf::actor& parker, Ts... xs) {
  caf::scoped_actor self{node.system()};
  bool parked = false;
  self->request(parker, 20s, xs...).receive([&](bool yes) { parked = yes; }, [](caf::error&) {});
  return parked;
}

// `who` ended, as its node sees it.
void end(TestNode& node, const caf::actor& who) {
  caf::scoped_actor self{node.system()};
  self->monitor(who);
  self->send_exit(who, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
}

// A request to `owner` that would wait there, refused as one too many?
template <class... Ts>
bool tooMany(TestNode& node, const caf::actor& owner, Ts... xs) {
  caf::scoped_actor self{node.system()};
  bool refused = false;
  self->request(owner, 5s, xs...).receive(
      [](const caf::message&) {},
      [&](caf::error& error) { refused = actorpipe::remote::isError(error, RemoteError::kTooManyRequests); });
  return refused;
}

size_t countOf(ParkedAnswers& answers, bool items) {
  std::lock_guard<std::mutex> guard(answers.mutex);
  return items ? answers.items.size() : answers.statuses.size();
}

// Waits (up to 10 s) until `answers` has `n` items (or statuses).
bool answered(ParkedAnswers& answers, size_t n, bool items = true) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (countOf(answers, items) < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  return countOf(answers, items) >= n;
}


// An owner node with a bound of 4 and two channels exported, "empty" and
// "full" (capacity 1, holding a 0), and a client node with their owners.
struct ParkingNodes {
  static NodeOptions bound4() {
    auto options = TestNode::quick();
    options.maxParkedPerPeer = 4;
    return options;
  }
  explicit ParkingNodes(NodeOptions ownerOptions = bound4())
      : owner(std::move(ownerOptions)), empty(4), full(1) {
    REQUIRE(full.write(int32_t(0)) == Status::kOpen);
    REQUIRE(!actorpipe::remote::exportChannel(owner.node(), empty, "empty"));
    REQUIRE(!actorpipe::remote::exportChannel(owner.node(), full, "full"));
    emptyOwner = caf::actor_cast<caf::actor>(
        RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "empty")->owner());
    fullOwner = caf::actor_cast<caf::actor>(
        RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "full")->owner());
  }
  auto parts() { return std::tie(client, empty, full, emptyOwner, fullOwner); }

  TestNode owner, client;
  Channel<int32_t> empty, full;
  caf::actor emptyOwner, fullOwner;
};

// An owner node that lets each peer park `bound` requests, with a channel
// "numbers" (capacity 8) exported, and a client node that opened it.
struct NumbersAtOwner {
  static NodeOptions bounded(size_t bound) {
    auto options = TestNode::quick();
    options.maxParkedPerPeer = bound;
    return options;
  }
  explicit NumbersAtOwner(size_t bound) : owner(bounded(bound)), numbers(8) {
    REQUIRE(!actorpipe::remote::exportChannel(owner.node(), numbers, "numbers"));
    auto opened = RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "numbers");
    REQUIRE(opened);
    remote.emplace(std::move(*opened));
  }
  // A blocking read of the remote channel on a thread of its own: the item, or -1.
  std::future<int32_t> readOnThread() {
    return std::async(std::launch::async, [this] {
      auto read = remote->read();
      return read.item ? *read.item : -1;
    });
  }
  // The client's requests awaiting answers (reads parked at the owner).
  size_t pending() {
    size_t n = 0;
    for (auto& link : client.node().stats()) n += link.pendingRequests;
    return n;
  }
  // Closes the channel when it goes: declared after a test's blocked
  // reads, a REQUIRE that fails lets them return (each waits for ever).
  struct CloseAtEnd {
    Channel<int32_t>& channel;
    ~CloseAtEnd() { channel.close(); }
  };
  CloseAtEnd closeAtEnd() { return CloseAtEnd{numbers}; }
  // Waits (up to 10 s) until `n` are.
  bool parked(size_t n) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         pending() < n && std::chrono::steady_clock::now() < deadline;)
      std::this_thread::sleep_for(1ms);
    return pending() >= n;
  }

  TestNode owner, client;
  Channel<int32_t> numbers;
  std::optional<RemoteChannel<int32_t>> remote;
};

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

TEST_CASE("a node's reads and writes waiting at a channel's owner are bounded (maxParkedPerPeer)") {
  ParkingNodes nodes;
  auto [client, empty, full, emptyOwner, fullOwner] = nodes.parts();
  auto readAnswers = std::make_shared<ParkedAnswers>();
  auto writeAnswers = std::make_shared<ParkedAnswers>();
  auto reader = client.system().spawn(parker, emptyOwner, readAnswers);
  auto writer = client.system().spawn(parker, fullOwner, writeAnswers);
  for (int32_t i = 1; i <= 4; ++i) {
    CHECK(park(client, reader, park_read_atom::value));
    CHECK(park(client, writer, park_write_atom::value, i));
  }
  // The fifth of the node's, from whichever of its actors: refused at
  // once, nothing held. (Without the bound: a timeout after 5 s.)
  CHECK(tooMany(client, emptyOwner, actorpipe::remote::channel_read_atom::value));
  CHECK(tooMany(client, fullOwner, actorpipe::remote::channel_write_atom::value, int32_t(100)));
  // One that need not wait is served still: it takes the 0, and the
  // first parked write moves in.
  {
    caf::scoped_actor self{client.system()};
    int32_t got = -1;
    self->request(fullOwner, 5s, actorpipe::remote::channel_read_atom::value)
        .receive([&](uint8_t, int32_t item) { got = item; }, [](caf::error&) {});
    CHECK(got == 0);
  }
  // The parked ones are served in turn, and the refused write is nowhere.
  for (int32_t i = 1; i <= 4; ++i) {
    REQUIRE(empty.write(int32_t(10 * i)) == Status::kOpen);
    auto read = full.readFor(5s);
    REQUIRE(read.item);
    CHECK(*read.item == i);
  }
  CHECK(full.tryRead().status == Status::kEmpty);
  REQUIRE(answered(*readAnswers, 4));
  CHECK(readAnswers->items == std::vector<int32_t>{10, 20, 30, 40});
  REQUIRE(answered(*writeAnswers, 4, false));
  // Their share is free again.
  CHECK(park(client, reader, park_read_atom::value));
  empty.close();
  CHECK(answered(*readAnswers, 1, false));
  CHECK(readAnswers->errors.empty());
  CHECK(writeAnswers->errors.empty());
}

TEST_CASE("a peer with the secret that claims an honest node's id has a share of its own at a channel's owner") {
  // Shares are the link's (peerLinkOf), not the node id a HELLO states:
  // counted by node id, the hand-made peer's four parked reads were the
  // honest node's share too, and its reads were refused for ever.
  auto options = ParkingNodes::bound4();
  options.heartbeatTimeout = 120s;  // the hand-made peer sends no BEATs
  ParkingNodes nodes(options);
  auto [client, empty, full, emptyOwner, fullOwner] = nodes.parts();
  auto context = testing::makeContext("attacker");
  auto pipe = context->connect(nodes.owner.node().url("tcp"));
  uint64_t owner = attackerHello(*pipe, actorpipe::remote::detail::channelName("empty"),
                                 client.system().node());
  constexpr uint64_t kAttacker = 5;
  for (uint64_t i = 1; i <= 5; ++i) {
    attackerAsk(*pipe, client.system(), owner, kAttacker, i,
                caf::make_message(actorpipe::remote::channel_read_atom::value));
  }
  // One sender's requests are handled in order: the first answer is the
  // fifth's (refused), so the four before it wait.
  uint64_t firstAnswered = 0;
  REQUIRE(awaitFrame(*pipe, [&](const actorpipe::remote::detail::Frame& f) {
    using Kind = actorpipe::remote::detail::Frame::Kind;
    if (f.aid != kAttacker || (f.kind != Kind::kMessage && f.kind != Kind::kInline)) return false;
    firstAnswered = f.messageId & 0xffffffffu;
    return true;
  }));
  REQUIRE(firstAnswered == 5);
  auto answers = std::make_shared<ParkedAnswers>();
  auto reader = client.system().spawn(parker, emptyOwner, answers);
  REQUIRE(park(client, reader, park_read_atom::value));
  for (int i = 0; i < 3; ++i) CHECK(park(client, reader, park_read_atom::value));
  CHECK(tooMany(client, emptyOwner, actorpipe::remote::channel_read_atom::value));
  empty.close();
  CHECK(answered(*answers, 4, false));
  CHECK(answers->errors.empty());
  pipe->close();
  context->join();
}

TEST_CASE("anonymous requests at a channel's owner: no read, and a write only if it need not wait") {
  // A read with no sender would take an item for nobody; a write with no
  // sender that waited would hold its item with no one to tell.
  ParkingNodes nodes;
  auto [client, empty, full, emptyOwner, fullOwner] = nodes.parts();
  // The owner takes one link's messages in order: once a request sent
  // after them is answered, the anonymous ones were handled.
  auto handled = [&client = client](const caf::actor& owner) {
    caf::scoped_actor self{client.system()};
    bool answered = false;
    self->request(owner, 10s, actorpipe::remote::channel_status_atom::value)
        .receive([&](uint8_t) { answered = true; }, [](caf::error&) {});
    return answered;
  };
  caf::anon_send(emptyOwner, actorpipe::remote::channel_read_atom::value);
  REQUIRE(handled(emptyOwner));
  REQUIRE(empty.write(int32_t(7)) == Status::kOpen);
  auto read = empty.tryRead();
  REQUIRE(read.item);
  CHECK(*read.item == 7);
  caf::anon_send(emptyOwner, actorpipe::remote::channel_write_atom::value, int32_t(8));
  REQUIRE(handled(emptyOwner));
  read = empty.tryRead();
  REQUIRE(read.item);
  CHECK(*read.item == 8);
  caf::anon_send(fullOwner, actorpipe::remote::channel_write_atom::value, int32_t(9));
  REQUIRE(handled(fullOwner));
  read = full.tryRead();
  REQUIRE(read.item);
  CHECK(*read.item == 0);
  CHECK(full.tryRead().status == Status::kEmpty);
}

TEST_CASE("a node's parked writes are bounded in bytes too (maxParkedBytesPerPeer)") {
  auto options = TestNode::quick();
  options.maxParkedBytesPerPeer = 1;  // any write's message is more
  TestNode owner(options), client;
  Channel<int32_t> full(1);
  REQUIRE(full.write(int32_t(0)) == Status::kOpen);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), full, "full"));
  auto fullOwner = caf::actor_cast<caf::actor>(
      RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "full")->owner());
  auto answers = std::make_shared<ParkedAnswers>();
  auto writer = client.system().spawn(parker, fullOwner, answers);
  // One larger than the bound parks alone; a second is refused.
  CHECK(park(client, writer, park_write_atom::value, int32_t(1)));
  CHECK(tooMany(client, fullOwner, actorpipe::remote::channel_write_atom::value, int32_t(2)));
  CHECK(*full.readFor(5s).item == 0);
  CHECK(*full.readFor(5s).item == 1);
  REQUIRE(answered(*answers, 1, false));
  // Its bytes are free again: full once more, another write parks.
  REQUIRE(full.write(int32_t(9)) == Status::kOpen);
  CHECK(park(client, writer, park_write_atom::value, int32_t(3)));
  CHECK(*full.readFor(5s).item == 9);
  CHECK(*full.readFor(5s).item == 3);
  CHECK(answers->errors.empty());
}

TEST_CASE("requests left waiting at a channel's owner by a requester that ended are let go, and take no item") {
  ParkingNodes nodes;
  auto [client, empty, full, emptyOwner, fullOwner] = nodes.parts();
  auto gone = std::make_shared<ParkedAnswers>();
  auto after = std::make_shared<ParkedAnswers>();
  // The node's whole share, held by one actor that then ends; another of
  // its actors parks as much. Refused for ever if the first one's were
  // held until a writer (or a reader) walked past them.
  SUBCASE("reads") {
    auto first = client.system().spawn(parker, emptyOwner, gone);
    for (int i = 0; i < 4; ++i) REQUIRE(park(client, first, park_read_atom::value));
    end(client, first);
    auto second = client.system().spawn(parker, emptyOwner, after);
    for (int i = 0; i < 4; ++i) REQUIRE(park(client, second, park_read_atom::value));
    for (int32_t i = 1; i <= 4; ++i) REQUIRE(empty.write(i) == Status::kOpen);
    REQUIRE(answered(*after, 4));
    CHECK(after->items == std::vector<int32_t>{1, 2, 3, 4});
    CHECK(gone->items.empty());
  }
  SUBCASE("writes") {
    auto first = client.system().spawn(parker, fullOwner, gone);
    for (int32_t i = 1; i <= 4; ++i) REQUIRE(park(client, first, park_write_atom::value, 10 + i));
    end(client, first);
    auto second = client.system().spawn(parker, fullOwner, after);
    for (int32_t i = 1; i <= 4; ++i) REQUIRE(park(client, second, park_write_atom::value, 20 + i));
    // The ended writer's items were dropped with its writes, as a local
    // actor's are: only the second one's come.
    std::vector<int32_t> read;
    for (int i = 0; i < 5; ++i) {
      auto r = full.readFor(5s);
      REQUIRE(r.item);
      read.push_back(*r.item);
    }
    CHECK(read == std::vector<int32_t>{0, 21, 22, 23, 24});
    CHECK(full.tryRead().status == Status::kEmpty);
  }
  CHECK(gone->errors.empty());
  CHECK(after->errors.empty());
}

TEST_CASE("a peer's actor back in a new proxy is watched again: its read, left when it ends, is let go") {
  auto options = TestNode::quick();
  options.maxParkedPerPeer = 1;
  TestNode owner(options), client;
  Channel<int32_t> numbers(4);
  REQUIRE(!actorpipe::remote::exportChannel(owner.node(), numbers, "numbers"));
  auto numbersOwner = caf::actor_cast<caf::actor>(
      RemoteChannel<int32_t>::open(client.node(), owner.node().url("shm"), "numbers")->owner());
  auto first = std::make_shared<ParkedAnswers>();
  auto reader = client.system().spawn(parker, numbersOwner, first);
  REQUIRE(park(client, reader, park_read_atom::value));
  REQUIRE(numbers.write(int32_t(1)) == Status::kOpen);
  REQUIRE(answered(*first, 1));
  // Other actors of the client's node come to the owner's node, each in a
  // proxy there: the reader's leaves the link's recent proxies and, with
  // nothing holding it, is gone (nothing says so: no DOWN).
  for (int i = 0; i < 40; ++i) {
    caf::scoped_actor other{client.system()};
    other->request(numbersOwner, 5s, actorpipe::remote::channel_status_atom::value)
        .receive([](uint8_t) {}, [](caf::error&) {});
  }
  // It parks again, in a new proxy; then it ends. Watched by its address
  // only, the new proxy was not, and the read stayed wanted: it held the
  // node's share for ever and would take the next item for nobody.
  REQUIRE(park(client, reader, park_read_atom::value));
  end(client, reader);
  auto second = std::make_shared<ParkedAnswers>();
  auto next = client.system().spawn(parker, numbersOwner, second);
  CHECK(park(client, next, park_read_atom::value));
  REQUIRE(numbers.write(int32_t(2)) == Status::kOpen);
  CHECK(answered(*second, 1));
  CHECK(first->items == std::vector<int32_t>{1});
  end(client, next);
}

TEST_CASE("blocking reads past maxParkedPerPeer wait their turn; importChannel's reader too") {
  NumbersAtOwner nodes(2);
  auto [client, numbers, remote] = std::tie(nodes.client, nodes.numbers, nodes.remote);
  // Two blocked readers hold the node's share; a third asks again until
  // there is room, as a local read would wait, and so does an imported
  // channel's reader.
  std::vector<std::future<int32_t>> reads;
  for (int i = 0; i < 3; ++i) reads.push_back(nodes.readOnThread());
  auto closing = nodes.closeAtEnd();
  auto local = actorpipe::remote::importChannel(client.node(), *remote, 1);
  // Two wait at the owner (answers awaited by the client's node); the
  // others were refused by now and ask again. (Had they not asked yet, the
  // outcome would be the same, and the retry untested.)
  CHECK(nodes.parked(2));
  std::this_thread::sleep_for(100ms);
  // Five: the imported channel's reader may take a second item before
  // a blocked thread gets its first.
  for (int32_t i = 1; i <= 5; ++i) REQUIRE(numbers.write(i) == Status::kOpen);
  std::vector<int32_t> got;
  for (auto& read : reads) {
    REQUIRE(read.wait_for(10s) == std::future_status::ready);
    got.push_back(read.get());
  }
  for (int i = 0; i < 2; ++i) {
    auto imported = local.readFor(10s);
    REQUIRE(imported.item);
    got.push_back(*imported.item);
  }
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int32_t>{1, 2, 3, 4, 5});
  CHECK(!remote->error());
  numbers.close();
  CHECK(local.readFor(10s).status == Status::kDrained);
}

TEST_CASE("importChannel closed here while its reader waits to ask again: it ends and takes no item") {
  NumbersAtOwner nodes(1);
  auto [client, numbers, remote] = std::tie(nodes.client, nodes.numbers, nodes.remote);
  // A blocked reader holds the node's share at the owner: the imported
  // channel's reader is refused, and asks again every 20 ms.
  auto blocked = nodes.readOnThread();
  auto closing = nodes.closeAtEnd();
  REQUIRE(nodes.parked(1));
  auto ended = std::make_shared<std::promise<caf::error>>();
  auto local = actorpipe::remote::importChannel(client.node(), *remote, 1,
                                                [ended](caf::error error) { ended->set_value(std::move(error)); });
  std::this_thread::sleep_for(100ms);  // refused, and asked again
  local.close();
  // At its next turn the reader sees the close and ends, rather than ask
  // until an item comes and drop it into the closed channel.
  auto end = ended->get_future();
  const bool endedNow = end.wait_for(5s) == std::future_status::ready;
  CHECK(endedNow);  // (not REQUIRE: the blocked reader must get its item below)
  if (endedNow) CHECK(!end.get());
  REQUIRE(numbers.write(1) == Status::kOpen);
  REQUIRE(numbers.write(2) == Status::kOpen);
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  CHECK(blocked.get() == 1);
  std::this_thread::sleep_for(100ms);
  auto left = numbers.tryRead();
  REQUIRE(left.item);
  CHECK(*left.item == 2);
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
