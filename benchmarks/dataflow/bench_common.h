#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

namespace bench {

struct Settings {
  int repetitions = 5;
  std::size_t queueItems = 2'000'000;
  std::size_t queueCapacity = 1024;
  std::size_t actorMessages = 2'000'000;
};

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  auto n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Runs `once` (which returns seconds) `repetitions` times; returns all runs.
inline std::vector<double> repeat(int repetitions, const std::function<double()>& once) {
  std::vector<double> seconds;
  for (int i = 0; i < repetitions; ++i)
    seconds.push_back(once());
  return seconds;
}

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void queueBenchmarks(const Settings& settings);
void actorBenchmarks(const Settings& settings);

} // namespace bench
