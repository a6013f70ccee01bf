#include <actorpipe/actors/dataflow/channel.h>
#include <actorpipe/actors/dataflow/map.h>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

using namespace actorpipe::dataflow;
using namespace std::chrono_literals;

TEST_CASE("map: results come back in worker order") {
  auto handle = map(
    8,
    [](int base, const std::string& tag, std::size_t index) {
      // Later workers finish first, so order cannot come from timing.
      std::this_thread::sleep_for(std::chrono::milliseconds(8 - index));
      return tag + std::to_string(base + int(index));
    },
    10, std::string("w"));
  auto results = handle.join();
  REQUIRE(results.size() == 8);
  for (std::size_t i = 0; i < 8; ++i)
    CHECK(results[i] == "w" + std::to_string(10 + i));
}

TEST_CASE("map: a worker's error is rethrown after all workers finished") {
  std::atomic<int> finished{0};
  auto handle = map(5, [&](std::size_t index) {
    if (index == 2)
      throw std::runtime_error("worker 2 failed");
    std::this_thread::sleep_for(20ms);
    ++finished;
    return int(index);
  });
  CHECK_THROWS_WITH(handle.join(), "worker 2 failed");
  CHECK(finished.load() == 4);
}

TEST_CASE("map: checkErrors reports a failure without waiting") {
  Channel<int> gate;
  auto handle = map(3, [gate](std::size_t index) mutable {
    if (index == 0)
      throw std::invalid_argument("bad input");
    gate.read(); // the others wait until released
  });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  bool reported = false;
  while (!reported && std::chrono::steady_clock::now() < deadline) {
    try {
      handle.checkErrors();
      std::this_thread::sleep_for(1ms);
    } catch (const std::invalid_argument&) {
      reported = true;
    }
  }
  CHECK(reported);
  CHECK(!handle.done());
  gate.close();
  CHECK_THROWS_AS(handle.join(), std::invalid_argument);
  CHECK(handle.done());
}

TEST_CASE("map: a thousand workers") {
  auto handle = map(1000, [](std::size_t index) { return index * 2; });
  auto results = handle.join();
  REQUIRE(results.size() == 1000);
  bool all = true;
  for (std::size_t i = 0; i < results.size(); ++i)
    all = all && results[i] == i * 2;
  CHECK(all);
}

TEST_CASE("map: workers sharing channels") {
  Channel<int> work;
  Channel<int> done;
  for (int i = 1; i <= 100; ++i)
    work.write(i);
  work.close();
  auto handle = map(
    4,
    [](Channel<int> in, Channel<int> out, std::size_t) {
      int sum = 0;
      for (auto read = in.read(); read.item; read = in.read())
        sum += *read.item;
      out.write(sum);
      return sum;
    },
    work, done);
  int total = 0;
  for (int sum : handle.join())
    total += sum;
  CHECK(total == 5050);
  CHECK(done.size() == 4);
}
