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
constexpr Item stop_marker = std::numeric_limits<Item>::max();

// Both runners check what arrives, so neither can win by losing items.
void check_sum(Item got, std::size_t producers, std::size_t per_producer) {
  Item expected = producers * (per_producer * (per_producer - 1) / 2);
  if (got != expected)
    throw std::runtime_error("benchmark lost or duplicated items");
}

double run_baseline(std::size_t producers, std::size_t consumers, std::size_t items,
                    std::size_t capacity) {
  BaselineQueue<Item> queue(capacity);
  auto per_producer = items / producers;
  std::atomic<Item> sum{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < consumers; ++c)
    threads.emplace_back([&] {
      Item local = 0;
      for (Item item = queue.pop(); item != stop_marker; item = queue.pop())
        local += item;
      sum += local;
    });
  std::vector<std::thread> writers;
  for (std::size_t p = 0; p < producers; ++p)
    writers.emplace_back([&] {
      for (Item i = 0; i < per_producer; ++i)
        queue.push(i);
    });
  for (auto& writer : writers)
    writer.join();
  for (std::size_t c = 0; c < consumers; ++c)
    queue.push(stop_marker);
  for (auto& thread : threads)
    thread.join();
  auto seconds = seconds_since(start);
  check_sum(sum.load(), producers, per_producer);
  return seconds;
}

double run_channel(std::size_t producers, std::size_t consumers, std::size_t items,
                   std::size_t capacity) {
  actorpipe::dataflow::Channel<Item> channel(capacity);
  auto per_producer = items / producers;
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
      for (Item i = 0; i < per_producer; ++i)
        channel.write(i);
    });
  for (auto& writer : writers)
    writer.join();
  channel.close();
  for (auto& thread : threads)
    thread.join();
  auto seconds = seconds_since(start);
  check_sum(sum.load(), producers, per_producer);
  return seconds;
}

void compare(const Settings& settings, std::size_t producers, std::size_t consumers,
             double target_ratio) {
  auto items = settings.queue_items;
  // Interleaved so that a noisy phase of the machine hits both sides.
  std::vector<double> baseline_runs, channel_runs;
  for (int r = 0; r < settings.repetitions; ++r) {
    baseline_runs.push_back(run_baseline(producers, consumers, items, settings.queue_capacity));
    channel_runs.push_back(run_channel(producers, consumers, items, settings.queue_capacity));
  }
  auto baseline_rate = items / median(baseline_runs) / 1e6;
  auto channel_rate = items / median(channel_runs) / 1e6;
  auto ratio = channel_rate / baseline_rate;
  std::printf("%zuP/%zuC 8-byte items, capacity %zu: baseline %.2f M/s, channel %.2f M/s, "
              "ratio %.2fx (target >= %.1fx) %s\n",
              producers, consumers, settings.queue_capacity, baseline_rate, channel_rate,
              ratio, target_ratio, ratio >= target_ratio ? "OK" : "BELOW TARGET");
}

} // namespace

void queue_benchmarks(const Settings& settings) {
  compare(settings, 1, 1, 2.0);
  compare(settings, 4, 4, 1.5);
}

} // namespace bench
