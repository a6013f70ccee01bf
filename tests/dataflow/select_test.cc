#include <actorpipe/actors/dataflow/select.h>

#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

using namespace actorpipe::dataflow;
using namespace std::chrono_literals;

TEST_CASE("select: picks the channel that has an item") {
  std::vector<Channel<int>> channels{Channel<int>(), Channel<int>(), Channel<int>()};
  channels[1].write(11);
  auto selected = select(channels);
  CHECK(selected.index == 1);
  CHECK(selected.result.status == Status::kOpen);
  CHECK(*selected.result.item == 11);
  CHECK(trySelect(channels).result.status == Status::kEmpty);
  CHECK(trySelect(channels).index == Selected<int>::none);
}

TEST_CASE("select: times out, wakes on a later write, reports DRAINED") {
  std::vector<Channel<int>> channels{Channel<int>(), Channel<int>()};
  auto timed = selectFor(channels, 20ms);
  CHECK(timed.result.status == Status::kEmpty);
  CHECK(timed.index == Selected<int>::none);

  std::thread writer([&] {
    std::this_thread::sleep_for(20ms);
    channels[0].write(5);
  });
  auto woken = selectFor(channels, 10s);
  writer.join();
  CHECK(woken.index == 0);
  CHECK(*woken.result.item == 5);

  channels[0].close();
  channels[1].write(6);
  channels[1].close();
  auto last = select(channels);
  CHECK(last.index == 1);
  CHECK(last.result.status == Status::kClosed);
  CHECK(select(channels).result.status == Status::kDrained);
}

TEST_CASE("select: gathers everything from several producers") {
  std::vector<Channel<int>> channels{Channel<int>(8), Channel<int>(8), Channel<int>(8)};
  std::vector<std::thread> producers;
  for (int p = 0; p < 3; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < 300; ++i)
        channels[p].write(p * 1000 + i);
      channels[p].close();
    });
  std::vector<int> perChannel(3, 0);
  bool ordered = true;
  for (;;) {
    auto selected = select(channels);
    if (selected.result.status == Status::kDrained)
      break;
    REQUIRE(selected.result.item);
    auto index = selected.index;
    ordered = ordered && *selected.result.item == int(index) * 1000 + perChannel[index];
    ++perChannel[index];
  }
  for (auto& producer : producers)
    producer.join();
  CHECK(ordered);
  CHECK(perChannel == std::vector<int>{300, 300, 300});
}
