#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

namespace bench {

struct Settings {
  int repetitions = 5;
  std::size_t queue_items = 2'000'000;
  std::size_t queue_capacity = 1024;
  std::size_t actor_messages = 2'000'000;
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

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void queue_benchmarks(const Settings& settings);
void actor_benchmarks(const Settings& settings);

} // namespace bench
