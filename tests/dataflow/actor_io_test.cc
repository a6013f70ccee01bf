// Actors reading and writing channels without blocking scheduler threads.

#include "test_system.h"
#include "../support/harness.h"

#include <actorpipe/actors/dataflow/actor_io.h>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace actorpipe::dataflow;
using namespace std::chrono_literals;

namespace {

bool answers(caf::scoped_actor& self, const caf::actor& who, int question, int expected) {
  bool ok = false;
  self->request(who, std::chrono::seconds(5), question)
    .receive([&](int reply) { ok = reply == expected; }, [&](caf::error&) { ok = false; });
  return ok;
}

void sumUntilDrained(caf::event_based_actor* self, Channel<int> input,
                       Channel<long> result, long sum) {
  readThen(self, input, [=](ReadResult<int> read) {
    if (!read.item) {
      result.write(sum);
      self->quit();
      return;
    }
    sumUntilDrained(self, input, result, sum + *read.item);
  });
}

void writeFrom(caf::event_based_actor* self, Channel<int> output, int next, int last) {
  if (next > last) {
    output.close();
    self->quit();
    return;
  }
  writeThen(self, output, next, [=](Status status) {
    if (status == Status::kOpen)
      writeFrom(self, output, next + 1, last);
    else
      self->quit();
  });
}

} // namespace

TEST_CASE("actors: parked reads leave the only scheduler thread free") {
  TestSystem system(1);
  Channel<int> input;
  Channel<int> results;
  std::vector<caf::actor> readers;
  for (int i = 0; i < 8; ++i)
    readers.push_back(system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      readThen(self, input, [=](ReadResult<int> read) {
        results.write(read.item ? *read.item : -1);
        self->quit();
      });
      return {[](int x) { return x + 1; }};
    }));
  auto echo = system.get().spawn([]() -> caf::behavior { return {[](int x) { return x * 2; }}; });
  caf::scoped_actor self{system.get()};
  // Eight actors wait on an empty channel, yet with a single scheduler
  // thread other actors, and the waiting ones themselves, still answer.
  CHECK(answers(self, echo, 21, 42));
  CHECK(answers(self, readers[3], 1, 2));
  for (int i = 0; i < 8; ++i)
    input.write(i);
  std::vector<int> received;
  for (int i = 0; i < 8; ++i) {
    auto read = results.readFor(5s);
    REQUIRE(read.item);
    received.push_back(*read.item);
  }
  std::sort(received.begin(), received.end());
  CHECK(received == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(input.size() == 0);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("actors: one actor consumes a bounded channel until drained") {
  TestSystem system(2);
  Channel<int> input(16);
  Channel<long> result;
  // Parked reads hold actors weakly: like any CAF actor, one nobody
  // references is unreachable and ends, so the test keeps the handle.
  auto consumer = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
    sumUntilDrained(self, input, result, 0);
    return {[](int) {}};
  });
  std::thread producer([&] {
    for (int i = 1; i <= 20000; ++i)
      input.write(i);
    input.close();
  });
  auto sum = result.readFor(30s);
  producer.join();
  REQUIRE(sum.item);
  CHECK(*sum.item == 20000L * 20001L / 2);
}

TEST_CASE("actors: writeThen parks on a full channel instead of blocking") {
  TestSystem system(1);
  Channel<int> output(2);
  auto producer = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
    writeFrom(self, output, 1, 300);
    return {[](int) {}};
  });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (output.size() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  // Time for the writer to reach its third write (and park, not block). A
  // slower machine cannot fail the checks below, only make them less
  // sensitive.
  std::this_thread::sleep_for(20ms);
  CHECK(output.size() == 2);
  // The writer is parked, not blocking: the only scheduler thread still works.
  auto echo = system.get().spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  caf::scoped_actor self{system.get()};
  CHECK(answers(self, echo, 5, 5));
  int expected = 1;
  for (auto read = output.read(); read.item; read = output.read()) {
    if (*read.item != expected)
      break;
    ++expected;
  }
  CHECK(expected == 301);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("actors: an item for a reader that vanished goes back to the channel") {
  Channel<int> channel;
  {
    TestSystem system(1);
    auto reader = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      readThen(self, channel, [](ReadResult<int>) {});
      return {[](int) {}};
    });
    // Time to park the read, then to end the actor. A slower machine cannot
    // fail this: an item for a reader that never parked, or that is killed
    // before its delivery runs, stays in (or goes back to) the channel too.
    std::this_thread::sleep_for(10ms);
    caf::anon_send_exit(reader, caf::exit_reason::kill);
    reader = nullptr;
    std::this_thread::sleep_for(10ms);
    channel.write(7);
    auto read = channel.readFor(5s);
    REQUIRE(read.item);
    CHECK(*read.item == 7);
  }
  CHECK(channel.size() == 0);
}

TEST_CASE("actors: a parked read never holds up actor system shutdown") {
  Channel<int> neverWritten; // outlives the system, reader still parked
  {
    TestSystem system(1);
    auto reader = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      readThen(self, neverWritten, [](ReadResult<int>) {});
      return {[](int) {}};
    });
    // Time to park the read. A slower machine cannot fail this, only leave
    // the read unparked (then the shutdown is trivially quick).
    std::this_thread::sleep_for(10ms);
  } // would hang here if the channel kept the actor alive
  CHECK(neverWritten.status() == Status::kOpen);
}

TEST_CASE("actors: a DRAINED read reaches every parked actor on close") {
  TestSystem system(1);
  Channel<int> channel;
  Channel<int> statuses;
  std::vector<caf::actor> readers;
  for (int i = 0; i < 5; ++i)
    readers.push_back(system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      readThen(self, channel, [=](ReadResult<int> read) {
        statuses.write(static_cast<int>(read.status));
        self->quit();
      });
      return {[](int) {}};
    }));
  // Time for the reads to park. A slower machine cannot fail this: a read
  // that comes after close() is answered DRAINED at once.
  std::this_thread::sleep_for(20ms);
  channel.close();
  for (int i = 0; i < 5; ++i) {
    auto read = statuses.readFor(5s);
    REQUIRE(read.item);
    CHECK(*read.item == static_cast<int>(Status::kDrained));
  }
}

TEST_CASE("actors: a parked write is refused when the channel closes") {
  TestSystem system(1);
  Channel<int> full(1);
  full.write(0);
  Channel<int> outcome;
  auto writer = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
    writeThen(self, full, 1, [=](Status status) {
      outcome.write(static_cast<int>(status));
      self->quit();
    });
    return {[](int) {}};
  });
  // Time for the write to park. A slower machine cannot fail this: the
  // check is that nothing was answered yet, and a write that comes after
  // close() is refused all the same.
  std::this_thread::sleep_for(20ms);
  CHECK(outcome.tryRead().status == Status::kEmpty); // still parked
  full.close();
  auto status = outcome.readFor(5s);
  REQUIRE(status.item);
  CHECK(*status.item == static_cast<int>(Status::kClosed));
  CHECK(*full.read().item == 0);
  CHECK(full.read().status == Status::kDrained);
}

namespace {

// Reads `input` into `outcome` until DRAINED, re-arming from inside each
// delivery (so it parks again from inside the default handler).
void copyUntilDrained(caf::event_based_actor* self, Channel<int> input, Channel<int> outcome) {
  readThen(self, input, [=](ReadResult<int> read) {
    if (!read.item) {
      self->quit();
      return;
    }
    outcome.write(*read.item);
    copyUntilDrained(self, input, outcome);
  });
}

} // namespace

TEST_CASE("actors: a default handler set before the first read still gets the messages no behavior matches") {
  TestSystem system(1);
  Channel<int> input;
  Channel<int> outcome;
  auto reader = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler([](caf::scheduled_actor*, caf::message_view& view) -> caf::result<caf::message> {
      if (view.content().match_elements<std::string>())
        return caf::make_message(static_cast<int>(view.content().get_as<std::string>(0).size()));
      return caf::sec::unexpected_message;
    });
    copyUntilDrained(self, input, outcome);
    return {[](double) {}};
  });
  caf::scoped_actor self{system.get()};
  // Each read parks, the first from the actor's start and the others from
  // inside a delivery; the actor's own handler still answers after each.
  // Before, the first replaced it; then one from inside a delivery did.
  for (int i = 1; i <= 3; ++i) {
    int answer = 0;
    self->request(reader, 5s, std::string(i, 'x')).receive([&](int size) { answer = size; },
                                                           [&](caf::error&) { answer = -1; });
    CHECK(answer == i);
    input.write(i);
    auto read = outcome.readFor(5s);
    REQUIRE(read.item);
    CHECK(*read.item == i);
  }
  input.close();
}

TEST_CASE("actors: unexpected messages are logged in a bounded number of lines") {
  TestSystem system(1);
  Channel<int> input;
  Channel<int> outcome;
  auto reader = system.get().spawn([=](caf::event_based_actor* self) -> caf::behavior {
    copyUntilDrained(self, input, outcome);
    return {[](double) {}};
  });
  testing::LogLines warnings;
  caf::scoped_actor self{system.get()};
  self->send(reader, std::string(10000, 'x'));
  for (int i = 2; i <= 1000; ++i) {
    self->send(reader, std::string("flood"));
    // Items between them: the reader parks again from inside a delivery,
    // which must not start the count afresh.
    if (i % 100 == 0)
      input.write(i);
  }
  // The 1001st, answered as CAF's print_and_drop answers; the reader's
  // mailbox is in order, so the 1000 before it were handled by then.
  caf::error refused;
  self->request(reader, 5s, std::string("last")).receive([](const caf::message&) {},
                                                         [&](caf::error& error) { refused = error; });
  CHECK(refused == caf::sec::unexpected_message);
  // The first 8, then the 16th, 32nd, ..., 512th: not a line each.
  CHECK(warnings.count("unexpected message dropped") == 14);
  CHECK(warnings.count("(10004 characters)") == 1);
  CHECK(warnings.count("512 so far") == 1);
  for (int i = 100; i <= 1000; i += 100) {
    auto read = outcome.readFor(5s);
    REQUIRE(read.item);
    CHECK(*read.item == i);
  }
  input.close();
}
