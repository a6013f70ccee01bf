// Three producer threads and one consumer share a bounded channel; the main
// thread closes it once every producer has written something, and a while
// later. The consumer must see every accepted item exactly once, each
// producer's items in the order they were written.

#include <actorpipe/actors/dataflow/channel.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

using namespace actorpipe::dataflow;

struct Item {
  int producer;
  long sequence;
};

int main() {
  constexpr int producers = 3;
  Channel<Item> channel(64);

  std::vector<long> accepted(producers, 0);
  std::atomic<int> started{0};  // producers whose first item was accepted
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      // Writes until the channel refuses; a refused item was not written.
      for (long sequence = 0; channel.write(Item{p, sequence}) == Status::kOpen; ++sequence) {
        accepted[p] = sequence + 1;
        if (sequence == 0) ++started;
      }
    });

  std::vector<long> received(producers, 0);
  bool inOrder = true;
  std::thread consumer([&] {
    for (auto read = channel.read(); read.item; read = channel.read()) {
      auto& item = *read.item;
      inOrder = inOrder && item.sequence == received[item.producer];
      ++received[item.producer];
    }
  });

  // On a busy machine a thread may wait long for a CPU: close only once all
  // have written (a minute at most: then something is stuck), then let them
  // run together for 300 ms.
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (started < producers && std::chrono::steady_clock::now() < giveUp)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  channel.close();
  for (auto& thread : threads)
    thread.join();
  consumer.join();

  bool ok = inOrder && channel.status() == Status::kDrained;
  long total = 0;
  for (int p = 0; p < producers; ++p) {
    std::printf("producer %d: %ld written, %ld received\n", p, accepted[p], received[p]);
    ok = ok && accepted[p] == received[p] && accepted[p] > 0;
    total += received[p];
  }
  std::printf("%ld items in 300 ms and more, per-producer order %s: %s\n", total,
              inOrder ? "kept" : "BROKEN", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
