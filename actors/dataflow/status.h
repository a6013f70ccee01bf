#pragma once

#include <cstdint>
#include <optional>
#include <utility>

namespace actorpipe::dataflow {

// Outcome of a channel operation. `open`, `closed` and `drained` follow
// torch-ipc; `empty` and `full` only come from non-blocking or timed calls
// that gave up without reading or writing anything.
enum class Status : std::uint8_t {
  kOpen,    // done; the channel accepts more
  kClosed,  // closed, still holding items (reads get them, writes are refused)
  kDrained, // closed and empty: nothing will ever come out again
  kEmpty,   // nothing to read yet (non-blocking read or read timeout)
  kFull,    // no room yet (non-blocking write or write timeout)
};

const char* to_string(Status status);

template <class T>
struct ReadResult {
  Status status = Status::kEmpty;
  std::optional<T> item;

  ReadResult() = default;
  explicit ReadResult(Status status) : status(status) {}
  ReadResult(Status status, T value) : status(status), item(std::move(value)) {}

  bool hasItem() const { return item.has_value(); }
  explicit operator bool() const { return item.has_value(); }
};

} // namespace actorpipe::dataflow
