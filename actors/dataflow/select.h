#pragma once

// Waiting on several channels at once (blocking threads only).

#include <actorpipe/actors/dataflow/channel.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

namespace actorpipe::dataflow {

template <class T>
struct Selected {
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  // Which channel the item came from; `none` when no item was read.
  std::size_t index = none;
  // Status and item of that read; DRAINED once every channel is drained,
  // EMPTY after a timeout or a non-blocking miss.
  ReadResult<T> result;
};

namespace detail {

inline std::size_t nextSelectStart() {
  // Rotating the first channel tried keeps one busy channel from starving
  // the others.
  static std::atomic<std::size_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

template <class T>
Selected<T> selectImpl(const std::vector<Channel<T>>& channels,
                        const Clock::time_point* deadline, bool blocking) {
  Selected<T> selected;
  if (channels.empty()) {
    selected.result = ReadResult<T>(Status::kDrained);
    return selected;
  }
  auto start = nextSelectStart();
  auto poll = [&] {
    std::size_t drained = 0;
    for (std::size_t k = 0; k < channels.size(); ++k) {
      auto index = (start + k) % channels.size();
      auto result = channels[index].state()->read(nullptr, false);
      if (result.hasItem()) {
        selected.index = index;
        selected.result = std::move(result);
        return true;
      }
      if (result.status == Status::kDrained)
        ++drained;
    }
    if (drained == channels.size()) {
      selected.result = ReadResult<T>(Status::kDrained);
      return true;
    }
    selected.result = ReadResult<T>(Status::kEmpty);
    return false;
  };
  for (;;) {
    if (poll() || !blocking)
      return selected;
    auto signal = std::make_shared<Signal>();
    bool ready = false;
    for (auto& channel : channels)
      ready = channel.state()->watch(signal) || ready;
    bool timed_out = false;
    if (!ready) {
      if (deadline)
        timed_out = !signal->wait_until(*deadline);
      else
        signal->wait();
    }
    for (auto& channel : channels)
      channel.state()->unwatch(signal);
    if (timed_out) {
      poll();
      return selected;
    }
  }
}

} // namespace detail

// Waits until one of the channels yields an item, or all are drained.
template <class T>
Selected<T> select(const std::vector<Channel<T>>& channels) {
  return detail::selectImpl(channels, nullptr, true);
}

template <class T>
Selected<T> trySelect(const std::vector<Channel<T>>& channels) {
  return detail::selectImpl(channels, nullptr, false);
}

template <class T, class Rep, class Period>
Selected<T> selectFor(const std::vector<Channel<T>>& channels,
                       std::chrono::duration<Rep, Period> timeout) {
  auto deadline = detail::Clock::now() + timeout;
  return detail::selectImpl(channels, &deadline, true);
}

} // namespace actorpipe::dataflow
