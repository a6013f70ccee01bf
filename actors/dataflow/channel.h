#pragma once

// Closable FIFO channels (torch-ipc semantics) with optional capacity.
//
// A Channel<T> is a cheap, copyable handle to shared state, so channels can
// be captured, stored, and sent through other channels. Blocking calls are
// for plain threads; actors use readThen/writeThen from actor_io.h, which
// park the request in the channel instead of blocking a scheduler thread.

#include <actorpipe/actors/dataflow/channel_state.h>
#include <actorpipe/actors/dataflow/status.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace actorpipe::dataflow {

// Operations are const: a Channel is a handle, like a shared_ptr, and
// const-ness of the handle says nothing about the shared queue.
template <class T>
class Channel {
public:
  using value_type = T;

  // capacity 0 means unbounded. With a capacity, writers wait for room.
  explicit Channel(std::size_t capacity = 0)
    : state_(std::make_shared<detail::ChannelState<T>>(capacity)) {
  }

  // Enqueues all items as one contiguous batch, waiting for room if the
  // channel is bounded. Returns OPEN, or CLOSED/DRAINED with nothing written.
  template <class... Us>
  Status write(Us&&... items) const {
    return writeImpl(nullptr, true, std::forward<Us>(items)...);
  }

  // Like write, but returns FULL instead of waiting for room.
  template <class... Us>
  Status tryWrite(Us&&... items) const {
    return writeImpl(nullptr, false, std::forward<Us>(items)...);
  }

  // Like write, but returns FULL if no room came within `timeout`.
  template <class Rep, class Period, class... Us>
  Status writeFor(std::chrono::duration<Rep, Period> timeout, Us&&... items) const {
    auto deadline = detail::Clock::now() + timeout;
    return writeImpl(&deadline, true, std::forward<Us>(items)...);
  }

  // Writes a whole vector as one atomic batch.
  Status writeAll(std::vector<T> items) const {
    auto count = items.size();
    return state_->write(
      count,
      [&](auto& queue) {
        for (auto& item : items)
          queue.push_back(std::move(item));
      },
      nullptr, true);
  }

  // Waits for an item. Returns (OPEN, item), (CLOSED, item) while a closed
  // channel still holds items, then (DRAINED, nothing).
  ReadResult<T> read() const { return state_->read(nullptr, true); }

  // Never waits: (EMPTY, nothing) if the channel is open but empty.
  ReadResult<T> tryRead() const { return state_->read(nullptr, false); }

  // Waits at most `timeout`: (EMPTY, nothing) on timeout.
  template <class Rep, class Period>
  ReadResult<T> readFor(std::chrono::duration<Rep, Period> timeout) const {
    auto deadline = detail::Clock::now() + timeout;
    return state_->read(&deadline, true);
  }

  // Idempotent. Refuses further writes and wakes every waiting reader and
  // writer; readers still get the remaining items.
  void close() const { state_->close(); }

  Status status() const { return state_->status(); }
  bool isClosed() const { return state_->status() != Status::kOpen; }
  std::size_t size() const { return state_->size(); }
  std::size_t capacity() const { return state_->capacity(); }

  const std::shared_ptr<detail::ChannelState<T>>& state() const { return state_; }

  friend bool operator==(const Channel& a, const Channel& b) {
    return a.state_ == b.state_;
  }
  friend bool operator!=(const Channel& a, const Channel& b) { return !(a == b); }

private:
  template <class... Us>
  Status writeImpl(const detail::Clock::time_point* deadline, bool blocking,
                    Us&&... items) const {
    static_assert(sizeof...(Us) > 0, "write needs at least one item");
    // Items are only moved from if the write happens, so a refused write
    // leaves the caller's values intact.
    return state_->write(
      sizeof...(Us),
      [&](auto& queue) { (queue.emplace_back(std::forward<Us>(items)), ...); },
      deadline, blocking);
  }

  std::shared_ptr<detail::ChannelState<T>> state_;
};

} // namespace actorpipe::dataflow
