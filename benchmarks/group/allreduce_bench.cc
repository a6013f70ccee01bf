// All-reduce of f32 sums over an actorpipe Tree. Run it under the launcher:
//
//   actorpipe-run -n 2 build/benchmarks/group/actorpipe-allreduce-bench [--sizes 4096,1048576] [--scale 0.5]
//
// Same measurement and output as mpi-allreduce-bench (allreduce_common.h).
#include <chrono>
#include <cstdio>
#include <vector>

#include <actorpipe/actors/group/tree.h>

#include "allreduce_common.h"

using namespace actorpipe::group;

int main(int argc, char** argv) {
  std::unique_ptr<Tree> tree;
  if (auto error = Tree::fromEnvironment(TreeOptions{}, tree)) {
    std::fprintf(stderr, "%s\n", error.what().c_str());
    return 1;
  }
  const bool report = tree->rank() == 0;
  if (report) {
    allreduce_bench::printHeader("actorpipe Tree", tree->size());
    for (const auto& line : tree->links()) std::printf("# rank 0 %s\n", line.c_str());
  }
  for (const auto& size : allreduce_bench::parseSizes(argc, argv)) {
    std::vector<float> values(size.bytes / sizeof(float), 1.0f);
    std::vector<double> microseconds;
    const int warmup = std::max(2, size.iterations / 10);
    for (int i = 0; i < warmup + size.iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (auto error = tree->allReduce({tensorOf(values)}, Reduction::sum())) {
        std::fprintf(stderr, "allReduce: %s\n", error.what().c_str());
        return 1;
      }
      const auto end = std::chrono::steady_clock::now();
      if (i >= warmup) microseconds.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    if (report) allreduce_bench::printRow(size.bytes, microseconds);
  }
  return 0;
}
