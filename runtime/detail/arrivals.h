#pragma once
// How often a peer's bytes arrived on one pipe: its connection's reads and
// its channels' copies each count here as they make progress. A watcher on
// another thread (the remote layer's heartbeat) that sees the count move
// knows the peer is alive while a long message is still arriving, without
// guessing from the message's size how long its bytes may take: a peer that
// announces a large message and then sends nothing is silent, and a slow
// link that still delivers is not.
//
// One per pipe, handed to its connection and endpoints once it is
// established; counted on whatever thread moves the bytes, read on any.
#include <atomic>
#include <cstdint>

namespace actorpipe::detail {

class Arrivals {
 public:
  void note(uint64_t times = 1) { count_.fetch_add(times, std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
};

}  // namespace actorpipe::detail
