#pragma once
// A single-producer single-consumer byte ring in shared memory. The header
// holds the counters and the two flags of the sleep protocol:
//   consumerSleeping: the consumer is about to block; a producer that adds
//                     bytes must wake it.
//   producerWaiting:  the producer has bytes that did not fit; a consumer that
//                     frees space must wake it.
// Each side sets its flag, then looks once more (seq_cst on both sides), so
// a wake-up is never lost and never sent while the other side is polling.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace actorpipe::transport::shm {

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever read
  alignas(64) std::atomic<uint32_t> consumerSleeping;
  alignas(64) std::atomic<uint32_t> producerWaiting;
  alignas(64) uint64_t capacity;  // a power of two, set by the creator
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters need lock-free atomics");

constexpr size_t kRingHeaderSize = 4096;

class Ring {
 public:
  Ring() = default;
  Ring(void* base, size_t capacity)
      : header_(static_cast<RingHeader*>(base)),
        data_(static_cast<uint8_t*>(base) + kRingHeaderSize),
        capacity_(capacity),
        mask_(capacity - 1) {}

  RingHeader* header() const { return header_; }

  // Producer side.
  size_t write(const uint8_t* src, size_t n) {
    uint64_t head = header_->head.load(std::memory_order_relaxed);
    uint64_t tail = header_->tail.load(std::memory_order_acquire);
    size_t space = capacity_ - static_cast<size_t>(head - tail);
    n = n < space ? n : space;
    if (n == 0) return 0;
    size_t at = static_cast<size_t>(head & mask_);
    size_t first = n < capacity_ - at ? n : capacity_ - at;
    std::memcpy(data_ + at, src, first);
    std::memcpy(data_, src + first, n - first);
    header_->head.store(head + n, std::memory_order_release);
    return n;
  }
  bool hasSpace() const {
    return header_->head.load(std::memory_order_relaxed) - header_->tail.load(std::memory_order_acquire) <
           capacity_;
  }

  // Consumer side.
  size_t read(uint8_t* dst, size_t n) {
    uint64_t tail = header_->tail.load(std::memory_order_relaxed);
    uint64_t head = header_->head.load(std::memory_order_acquire);
    size_t avail = static_cast<size_t>(head - tail);
    n = n < avail ? n : avail;
    if (n == 0) return 0;
    size_t at = static_cast<size_t>(tail & mask_);
    size_t first = n < capacity_ - at ? n : capacity_ - at;
    std::memcpy(dst, data_ + at, first);
    std::memcpy(dst + first, data_, n - first);
    header_->tail.store(tail + n, std::memory_order_release);
    return n;
  }
  bool hasData() const {
    return header_->head.load(std::memory_order_acquire) != header_->tail.load(std::memory_order_relaxed);
  }

 private:
  RingHeader* header_{nullptr};
  uint8_t* data_{nullptr};
  size_t capacity_{0};
  size_t mask_{0};
};

} // namespace actorpipe::transport::shm
