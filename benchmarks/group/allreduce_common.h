#pragma once
// What the actorpipe and the MPI all-reduce benchmarks share, so that both
// measure and print the same way: each rank calls all-reduce back to back
// (no barrier in between, like OSU's osu_allreduce), rank 0 times every
// call, and the median call is reported with its algorithmic bandwidth
// (bytes of the tensor / time).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace allreduce_bench {

struct Size {
  size_t bytes;
  int iterations;
};

// "4096,1048576" or the default set of the issue.
inline std::vector<Size> parseSizes(int argc, char** argv) {
  std::string list = "4096,1048576,16777216,67108864";
  double scale = 1.0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--sizes") list = argv[i + 1];
    if (std::string(argv[i]) == "--scale") scale = std::atof(argv[i + 1]);
  }
  std::vector<Size> sizes;
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const size_t bytes = std::strtoull(list.substr(start, comma - start).c_str(), nullptr, 10);
    // About 0.5-1 s of calls per size on the benchmark machine.
    int iterations = bytes <= 65536 ? 3000 : bytes <= (2u << 20) ? 300 : bytes <= (32u << 20) ? 40 : 15;
    iterations = std::max(3, static_cast<int>(iterations * scale));
    if (bytes > 0) sizes.push_back(Size{bytes, iterations});
    start = comma + 1;
  }
  return sizes;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

inline void printHeader(const char* implementation, int ranks) {
  std::printf("# %s, %d ranks, f32 sum; time per call (median of rank 0's calls)\n",
              implementation, ranks);
  std::printf("%-10s %12s %12s %12s %10s\n", "bytes", "median_us", "p10_us", "p90_us", "algbw_GB/s");
}

inline void printRow(size_t bytes, std::vector<double> microseconds) {
  std::sort(microseconds.begin(), microseconds.end());
  const double mid = median(microseconds);
  const double p10 = microseconds[microseconds.size() / 10];
  const double p90 = microseconds[microseconds.size() * 9 / 10];
  std::printf("%-10zu %12.1f %12.1f %12.1f %10.2f\n", bytes, mid, p10, p90,
              static_cast<double>(bytes) / (mid * 1e3));
  std::fflush(stdout);
}

} // namespace allreduce_bench
