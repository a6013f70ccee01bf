// Throughput of 8-byte items through a bounded queue, side by side.

#include "baseline_queue.h"
#include "bench_common.h"

#include <actorpipe/actors/dataflow/channel.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

namespace bench {

namespace {

using Item = std::uint64_t;
constexpr Item kStopMarker = std::numeric_limits<Item>::max();

// Both runners check what arrives, so neither can win by losing items.
void checkSum(Item got, std::size_t producers, std::size_t perProducer) {
  Item expected = producers * (perProducer * (perProducer - 1) / 2);
  if (got != expected)
    throw std::runtime_error("benchmark lost or duplicated items");
}

double runBaseline(std::size_t producers, std::size_t consumers, std::size_t items,
                    std::size_t capacity) {
  BaselineQueue<Item> queue(capacity);
  auto perProducer = items / producers;
  std::atomic<Item> sum{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < consumers; ++c)
    threads.emplace_back([&] {
      Item local = 0;
      for (Item item = queue.pop(); item != kStopMarker; item = queue.pop())
        local += item;
      sum += local;
    });
  std::vector<std::thread> writers;
  for (std::size_t p = 0; p < producers; ++p)
    writers.emplace_back([&] {
      for (Item i = 0; i < perProducer; ++i)
        queue.push(i);
    });
  for (auto& writer : writers)
    writer.join();
  for (std::size_t c = 0; c < consumers; ++c)
    queue.push(kStopMarker);
  for (auto& thread : threads)
    thread.join();
  auto seconds = secondsSince(start);
  checkSum(sum.load(), producers, perProducer);
  return seconds;
}

double runChannel(std::size_t producers, std::size_t consumers, std::size_t items,
                   std::size_t capacity) {
  actorpipe::dataflow::Channel<Item> channel(capacity);
  auto perProducer = items / producers;
  std::atomic<Item> sum{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < consumers; ++c)
    threads.emplace_back([&] {
      Item local = 0;
      for (auto read = channel.read(); read.item; read = channel.read())
        local += *read.item;
      sum += local;
    });
  std::vector<std::thread> writers;
  for (std::size_t p = 0; p < producers; ++p)
    writers.emplace_back([&] {
      for (Item i = 0; i < perProducer; ++i)
        channel.write(i);
    });
  for (auto& writer : writers)
    writer.join();
  channel.close();
  for (auto& thread : threads)
    thread.join();
  auto seconds = secondsSince(start);
  checkSum(sum.load(), producers, perProducer);
  return seconds;
}

void compare(const Settings& settings, std::size_t producers, std::size_t consumers,
             double targetRatio) {
  auto items = settings.queueItems;
  // Interleaved so that a noisy phase of the machine hits both sides.
  std::vector<double> baselineRuns, channelRuns;
  for (int r = 0; r < settings.repetitions; ++r) {
    baselineRuns.push_back(runBaseline(producers, consumers, items, settings.queueCapacity));
    channelRuns.push_back(runChannel(producers, consumers, items, settings.queueCapacity));
  }
  auto baselineRate = items / median(baselineRuns) / 1e6;
  auto channelRate = items / median(channelRuns) / 1e6;
  auto ratio = channelRate / baselineRate;
  std::printf("%zuP/%zuC 8-byte items, capacity %zu: baseline %.2f M/s, channel %.2f M/s, "
              "ratio %.2fx (target >= %.1fx) %s\n",
              producers, consumers, settings.queueCapacity, baselineRate, channelRate,
              ratio, targetRatio, ratio >= targetRatio ? "OK" : "BELOW TARGET");
}

} // namespace

void queueBenchmarks(const Settings& settings) {
  compare(settings, 1, 1, 2.0);
  compare(settings, 4, 4, 1.5);
}

} // namespace bench
