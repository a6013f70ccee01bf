// Channel semantics under real concurrency.

#include <actorpipe/actors/dataflow/channel.h>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

using namespace actorpipe::dataflow;
using namespace std::chrono_literals;

TEST_CASE("channel: producer and consumer threads") {
  Channel<int> channel;
  constexpr int count = 20000;
  std::thread producer([&] {
    for (int i = 0; i < count; ++i)
      channel.write(i);
    channel.close();
  });
  int expected = 0;
  bool inOrder = true;
  for (;;) {
    auto read = channel.read();
    if (!read.item)
      break;
    inOrder = inOrder && *read.item == expected;
    ++expected;
  }
  producer.join();
  CHECK(inOrder);
  CHECK(expected == count);
}

TEST_CASE("channel: ten blocked readers are released by close") {
  Channel<int> channel;
  std::atomic<int> drained{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 10; ++i)
    readers.emplace_back([&] {
      if (channel.read().status == Status::kDrained)
        ++drained;
    });
  // Time for the readers to block. A slower machine cannot fail this: the
  // check is that nothing was released, and a reader that has not blocked
  // by close() still reads DRAINED.
  std::this_thread::sleep_for(50ms);
  CHECK(drained.load() == 0);
  channel.close();
  for (auto& reader : readers)
    reader.join();
  CHECK(drained.load() == 10);
}

TEST_CASE("channel: close releases blocked writers of a full channel") {
  Channel<int> channel(1);
  channel.write(0);
  std::atomic<int> refused{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 3; ++i)
    writers.emplace_back([&, i] {
      if (channel.write(i) == Status::kClosed)
        ++refused;
    });
  // Time for the writers to block. A slower machine cannot fail this: a
  // writer that has not blocked by close() is refused all the same.
  std::this_thread::sleep_for(30ms);
  channel.close();
  for (auto& writer : writers)
    writer.join();
  CHECK(refused.load() == 3);
  CHECK(*channel.read().item == 0);
  CHECK(channel.read().status == Status::kDrained);
}

TEST_CASE("channel: ten generators through five forwarding workers") {
  Channel<int> generated;
  Channel<int> results;
  std::vector<std::thread> generators;
  for (int g = 0; g < 10; ++g)
    generators.emplace_back([&] {
      for (int value = 0; value < 100; ++value)
        generated.write(value);
    });
  std::vector<std::thread> workers;
  for (int w = 0; w < 5; ++w)
    workers.emplace_back([&] {
      for (auto read = generated.read(); read.item; read = generated.read())
        results.write(*read.item);
    });
  for (auto& generator : generators)
    generator.join();
  generated.close();
  for (auto& worker : workers)
    worker.join();
  results.close();
  std::map<int, int> seen;
  int total = 0;
  for (auto read = results.read(); read.item; read = results.read()) {
    ++seen[*read.item];
    ++total;
  }
  CHECK(total == 1000);
  CHECK(seen.size() == 100);
  bool eachTenTimes = true;
  for (auto& [value, times] : seen)
    eachTenTimes = eachTenTimes && times == 10;
  CHECK(eachTenTimes);
}

TEST_CASE("channel: a channel passed through a channel between threads") {
  Channel<Channel<int>> requests;
  std::thread server([&] {
    for (auto request = requests.read(); request.item; request = requests.read())
      request.item->write(42, 43);
  });
  for (int i = 0; i < 3; ++i) {
    Channel<int> reply;
    requests.write(reply);
    CHECK(*reply.read().item == 42);
    CHECK(*reply.read().item == 43);
  }
  requests.close();
  server.join();
}

TEST_CASE("channel: atomic batches stay contiguous with concurrent writers") {
  Channel<int> channel;
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      for (int batch = 0; batch < 200; ++batch) {
        int base = (w * 1000 + batch) * 3;
        channel.write(base, base + 1, base + 2);
      }
    });
  for (auto& writer : writers)
    writer.join();
  channel.close();
  bool contiguous = true;
  int batches = 0;
  for (auto first = channel.read(); first.item; first = channel.read()) {
    auto second = channel.read();
    auto third = channel.read();
    contiguous = contiguous && second.item && third.item && *second.item == *first.item + 1
                 && *third.item == *first.item + 2;
    ++batches;
  }
  CHECK(contiguous);
  CHECK(batches == 800);
}

TEST_CASE("channel: each item reaches exactly one of many readers") {
  Channel<int> channel(64);
  constexpr int writers = 4, readers = 4, perWriter = 5000;
  std::vector<std::vector<int>> received(readers);
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r)
    threads.emplace_back([&, r] {
      for (auto read = channel.read(); read.item; read = channel.read())
        received[r].push_back(*read.item);
    });
  std::vector<std::thread> producers;
  for (int w = 0; w < writers; ++w)
    producers.emplace_back([&, w] {
      for (int i = 0; i < perWriter; ++i)
        channel.write(w * perWriter + i);
    });
  for (auto& producer : producers)
    producer.join();
  channel.close();
  for (auto& thread : threads)
    thread.join();
  std::set<int> unique;
  std::size_t total = 0;
  for (auto& items : received) {
    total += items.size();
    unique.insert(items.begin(), items.end());
  }
  CHECK(total == writers * perWriter);
  CHECK(unique.size() == writers * perWriter);
}

TEST_CASE("channel: a bounded channel holds back a fast producer") {
  Channel<int> channel(4);
  std::atomic<int> written{0};
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) {
      channel.write(i);
      ++written;
    }
    channel.close();
  });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (written.load() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  // A chance for a fifth write to get through. A slower machine cannot fail
  // the check below, only make it less sensitive.
  std::this_thread::sleep_for(30ms);
  // The producer is stuck on its fifth write: memory stays bounded.
  CHECK(written.load() == 4);
  CHECK(channel.size() == 4);
  int expected = 0;
  for (auto read = channel.read(); read.item; read = channel.read()) {
    CHECK(channel.size() <= 4);
    if (*read.item != expected)
      break;
    ++expected;
  }
  producer.join();
  CHECK(expected == 100);
}

TEST_CASE("channel: an unbounded channel grows while readers take items") {
  Channel<std::vector<int>> channel;
  constexpr int batches = 20000;
  std::thread producer([&] {
    for (int i = 0; i < batches; ++i)
      channel.write(std::vector<int>{3 * i}, std::vector<int>{3 * i + 1},
                    std::vector<int>{3 * i + 2});
    channel.close();
  });
  int expected = 0;
  bool inOrder = true;
  for (auto read = channel.read(); read.item; read = channel.read()) {
    inOrder = inOrder && read.item->size() == 1 && read.item->front() == expected;
    ++expected;
  }
  producer.join();
  CHECK(inOrder);
  CHECK(expected == 3 * batches);
}

TEST_CASE("channel: timed reads and writes under concurrency lose nothing") {
  Channel<int> channel(3);
  constexpr int count = 5000;
  std::thread producer([&] {
    for (int i = 0; i < count; ++i)
      while (channel.writeFor(std::chrono::microseconds(50), i) == Status::kFull) {
      }
    channel.close();
  });
  int expected = 0;
  bool inOrder = true;
  for (;;) {
    auto read = channel.readFor(std::chrono::microseconds(50));
    if (read.status == Status::kDrained)
      break;
    if (!read.item)
      continue;
    inOrder = inOrder && *read.item == expected;
    ++expected;
  }
  producer.join();
  CHECK(inOrder);
  CHECK(expected == count);
}
