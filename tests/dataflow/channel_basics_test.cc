// Single-threaded channel semantics, after torch-ipc's channel tests.

#include <actorpipe/actors/dataflow/channel.h>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using namespace actorpipe::dataflow;
using namespace std::chrono_literals;

TEST_CASE("channel: single-thread write then read") {
  Channel<int> channel;
  for (int i = 0; i < 5; ++i)
    CHECK(channel.write(i) == Status::kOpen);
  CHECK(channel.size() == 5);
  for (int i = 0; i < 5; ++i) {
    auto read = channel.read();
    CHECK(read.status == Status::kOpen);
    REQUIRE(read.item);
    CHECK(*read.item == i);
  }
  CHECK(channel.status() == Status::kOpen);
}

TEST_CASE("channel: a 12-item write is read back in order") {
  Channel<int> channel;
  CHECK(channel.write(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12) == Status::kOpen);
  CHECK(channel.size() == 12);
  for (int i = 1; i <= 12; ++i)
    CHECK(*channel.read().item == i);
  CHECK(channel.writeAll({13, 14}) == Status::kOpen);
  CHECK(*channel.read().item == 13);
  CHECK(*channel.read().item == 14);
}

TEST_CASE("channel: close on a non-empty channel") {
  Channel<std::string> channel;
  CHECK(channel.write("a", "b") == Status::kOpen);
  channel.close();
  channel.close(); // idempotent
  std::string refused = "c";
  CHECK(channel.write(std::move(refused)) == Status::kClosed);
  CHECK(refused == "c"); // a refused write leaves the value alone
  CHECK(channel.status() == Status::kClosed);
  auto first = channel.read();
  CHECK(first.status == Status::kClosed);
  CHECK(*first.item == "a");
  auto second = channel.read();
  CHECK(second.status == Status::kClosed);
  CHECK(*second.item == "b");
  auto third = channel.read();
  CHECK(third.status == Status::kDrained);
  CHECK(!third.item);
  CHECK(channel.write("d") == Status::kDrained);
  CHECK(channel.status() == Status::kDrained);
  CHECK(channel.read().status == Status::kDrained);
}

TEST_CASE("channel: non-blocking and timed reads") {
  Channel<int> channel;
  CHECK(channel.tryRead().status == Status::kEmpty);
  auto before = std::chrono::steady_clock::now();
  auto timed = channel.readFor(20ms);
  CHECK(timed.status == Status::kEmpty);
  CHECK(!timed.item);
  CHECK(std::chrono::steady_clock::now() - before >= 20ms);
  channel.write(3);
  auto read = channel.readFor(1s);
  CHECK(read.status == Status::kOpen);
  CHECK(*read.item == 3);
  channel.close();
  CHECK(channel.tryRead().status == Status::kDrained);
  CHECK(channel.readFor(1s).status == Status::kDrained);
}

TEST_CASE("channel: bounded writes report FULL instead of waiting") {
  Channel<int> channel(2);
  CHECK(channel.capacity() == 2);
  CHECK(channel.tryWrite(1) == Status::kOpen);
  CHECK(channel.tryWrite(2) == Status::kOpen);
  CHECK(channel.tryWrite(3) == Status::kFull);
  CHECK(channel.writeFor(10ms, 3) == Status::kFull);
  CHECK(channel.size() == 2);
  channel.read();
  CHECK(channel.tryWrite(3) == Status::kOpen);
  // A batch larger than the capacity still enters an empty channel.
  Channel<int> three(3); // capacities need not be powers of two
  CHECK(three.write(1, 2, 3) == Status::kOpen);
  CHECK(three.tryWrite(4) == Status::kFull);
  CHECK(three.size() == 3);
  Channel<int> tiny(1);
  CHECK(tiny.write(1, 2, 3) == Status::kOpen);
  CHECK(tiny.tryWrite(4) == Status::kFull);
}

TEST_CASE("channel: handles compare by identity and travel through channels") {
  Channel<int> inner;
  Channel<Channel<int>> outer;
  outer.write(inner);
  auto received = outer.read();
  REQUIRE(received.item);
  CHECK(*received.item == inner);
  CHECK(*received.item != Channel<int>());
  received.item->write(42);
  CHECK(*inner.read().item == 42);
}
