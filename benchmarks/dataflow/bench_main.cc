// actorpipe-dataflow-bench [--quick]
//
// Channels against a mutex+condvar bounded queue, and tensor messages
// between actors. Every figure is the median over several repetitions,
// because these shared VMs are noisy.

#include "bench_common.h"

#include <cstdio>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  bench::Settings settings;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      settings.repetitions = 3;
      settings.queueItems = 200'000;
      settings.actorMessages = 200'000;
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      settings.repetitions = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  std::printf("actorpipe dataflow benchmark: %u hardware threads, %d repetitions, medians\n",
              std::thread::hardware_concurrency(), settings.repetitions);
  bench::queueBenchmarks(settings);
  bench::actorBenchmarks(settings);
  return 0;
}
