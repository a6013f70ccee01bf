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
    CHECK(channel.write(i) == Status::open);
  CHECK(channel.size() == 5);
  for (int i = 0; i < 5; ++i) {
    auto read = channel.read();
    CHECK(read.status == Status::open);
    REQUIRE(read.item);
    CHECK(*read.item == i);
  }
  CHECK(channel.status() == Status::open);
}

TEST_CASE("channel: a 12-item write is read back in order") {
  Channel<int> channel;
  CHECK(channel.write(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12) == Status::open);
  CHECK(channel.size() == 12);
  for (int i = 1; i <= 12; ++i)
    CHECK(*channel.read().item == i);
  CHECK(channel.write_all({13, 14}) == Status::open);
  CHECK(*channel.read().item == 13);
  CHECK(*channel.read().item == 14);
}

TEST_CASE("channel: close on a non-empty channel") {
  Channel<std::string> channel;
  CHECK(channel.write("a", "b") == Status::open);
  channel.close();
  channel.close(); // idempotent
  std::string refused = "c";
  CHECK(channel.write(std::move(refused)) == Status::closed);
  CHECK(refused == "c"); // a refused write leaves the value alone
  CHECK(channel.status() == Status::closed);
  auto first = channel.read();
  CHECK(first.status == Status::closed);
  CHECK(*first.item == "a");
  auto second = channel.read();
  CHECK(second.status == Status::closed);
  CHECK(*second.item == "b");
  auto third = channel.read();
  CHECK(third.status == Status::drained);
  CHECK(!third.item);
  CHECK(channel.write("d") == Status::drained);
  CHECK(channel.status() == Status::drained);
  CHECK(channel.read().status == Status::drained);
}

TEST_CASE("channel: non-blocking and timed reads") {
  Channel<int> channel;
  CHECK(channel.try_read().status == Status::empty);
  auto before = std::chrono::steady_clock::now();
  auto timed = channel.read_for(20ms);
  CHECK(timed.status == Status::empty);
  CHECK(!timed.item);
  CHECK(std::chrono::steady_clock::now() - before >= 20ms);
  channel.write(3);
  auto read = channel.read_for(1s);
  CHECK(read.status == Status::open);
  CHECK(*read.item == 3);
  channel.close();
  CHECK(channel.try_read().status == Status::drained);
  CHECK(channel.read_for(1s).status == Status::drained);
}

TEST_CASE("channel: bounded writes report FULL instead of waiting") {
  Channel<int> channel(2);
  CHECK(channel.capacity() == 2);
  CHECK(channel.try_write(1) == Status::open);
  CHECK(channel.try_write(2) == Status::open);
  CHECK(channel.try_write(3) == Status::full);
  CHECK(channel.write_for(10ms, 3) == Status::full);
  CHECK(channel.size() == 2);
  channel.read();
  CHECK(channel.try_write(3) == Status::open);
  // A batch larger than the capacity still enters an empty channel.
  Channel<int> three(3); // capacities need not be powers of two
  CHECK(three.write(1, 2, 3) == Status::open);
  CHECK(three.try_write(4) == Status::full);
  CHECK(three.size() == 3);
  Channel<int> tiny(1);
  CHECK(tiny.write(1, 2, 3) == Status::open);
  CHECK(tiny.try_write(4) == Status::full);
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
