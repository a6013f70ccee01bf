#pragma once
// A single-producer single-consumer byte ring in shared memory. The header
// holds the counters and the two flags of the sleep protocol:
//   consumerSleeping: the consumer is about to block; a producer that adds
//                     bytes must wake it.
//   producerWaiting:  the producer has bytes that did not fit; a consumer that
//                     frees space must wake it.
// Each side sets its flag, then looks once more (seq_cst on both sides), so
// a wake-up is never lost and never sent while the other side is polling.
//
// The peer is not trusted: it maps the same memory and may write anything
// into the header at any time. Hence:
//   * Each side keeps its own counter privately (the producer its head, the
//     consumer its tail) and only publishes it; it never reads it back, so
//     the peer cannot move it.
//   * The peer's counter is read once per operation and checked before any
//     index is derived from it. For the consumer: avail = peerHead - myTail
//     must be <= capacity and peerHead must not go backwards (below the last
//     head seen). For the producer: used = myHead - peerTail must be <=
//     capacity, and peerTail must neither go backwards nor pass myHead (with
//     unsigned counters both show as used > myHead - lastTailSeen).
//   * Capacity and mask are ours (from the setup, checked once), never
//     re-read from the header.
// A violation makes the ring corrupt for good: no byte moves any more and the
// connection fails with a ProtocolError. Honest peers never trip it, and the
// checks cost two compares per operation. The payload bytes themselves may
// change under us while we copy them (the peer can scribble on them): that
// only garbles what the peer sent us, and the layers above parse with checks.
//
// Header-only and free of CAF and libuv, so that the fuzzer (tests/fuzz)
// can play the peer against it directly.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
// A copy into or out of the ring publishes its counter after every step of
// this many bytes, not once at its end, so that a large transfer is a
// pipeline: the consumer copies out one step while the producer copies in
// the next, on the other CPU. Published once per call, a 2 MiB ring was
// filled whole, then drained whole: the two copies took turns and 64 MiB
// moved at about half the rate of one memcpy (docs/benchmarks.md). A step
// costs one release store; the peer sees the counter move sooner.
constexpr size_t kPublishStep = size_t{64} << 10;
static_assert(sizeof(RingHeader) <= kRingHeaderSize, "the ring header must fit its page");

// How a copy into or out of the ring moves its bytes.
//   kMemcpy:    memcpy. Best for small and cached copies (glibc's AVX-512).
//   kOwn:       a loop of 16-byte moves of our own, for the steps of a large
//               transfer. glibc's memcpy moves blocks over 2 KiB with `rep
//               movsb`, which on the AMD EPYC of docs/machine.md runs at a
//               fifth of its speed when the destination lies a few bytes
//               past the source modulo 4 KiB (3.2 against 15 GB/s for 64 KiB
//               steps), and a ring position against a tensor's address lands
//               there by chance. The loop is as fast as memcpy elsewhere, and
//               7% slower on a 64 KiB tensor in cache: hence only from
//               kOwnCopyFrom.
//   kStreaming: the same loop with non-temporal stores, for a reader's copy
//               of a large tensor out of the ring: plain stores first read
//               each destination line into the cache, later write it back,
//               and evict the ring's own lines on the way; streaming stores
//               write the line once. Tensors that fit the cache lose by it
//               (docs/benchmarks.md), hence the caller's threshold.
enum class Copy { kMemcpy, kOwn, kStreaming };
constexpr size_t kOwnCopyFrom = size_t{256} << 10;

inline void copyBlock(uint8_t* dst, const uint8_t* src, size_t n, Copy how) {
#if defined(__SSE2__)
  if (how == Copy::kMemcpy || n < 256) {
    std::memcpy(dst, src, n);
    return;
  }
  const bool streaming = how == Copy::kStreaming;
  if (streaming) {  // _mm_stream_si128 wants 16-byte aligned destinations
    size_t lead = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, lead);
    dst += lead;
    src += lead;
    n -= lead;
  }
  for (; n >= 64; n -= 64, src += 64, dst += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    if (streaming) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), b);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), c);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 48), d);
    }
  }
  std::memcpy(dst, src, n);
  if (streaming) _mm_sfence();  // visible before the reader's completion is
#else
  (void)how;
  std::memcpy(dst, src, n);
#endif
}

class Ring {
 public:
  Ring() = default;
  // `capacity`: a power of two, the size of the data area after the header.
  // Both counters start at 0 (the creator zeroes the header before sending it).
  Ring(void* base, size_t capacity)
      : header_(static_cast<RingHeader*>(base)),
        data_(static_cast<uint8_t*>(base) + kRingHeaderSize),
        capacity_(capacity),
        mask_(capacity - 1) {}

  RingHeader* header() const { return header_; }
  size_t capacity() const { return capacity_; }
  // Our own counter (bytes written, or read), and the data area: for
  // faulting pages in ahead of use (ShmConnection::prefault).
  uint64_t position() const { return mine_; }
  uint8_t* data() const { return data_; }
  // The peer broke the counter protocol; sticky.
  bool corrupt() const { return corrupt_; }

  // Producer side.
  size_t write(const uint8_t* src, size_t n) {
    uint64_t tail;
    if (!peerTail(tail)) return 0;
    size_t space = capacity_ - static_cast<size_t>(mine_ - tail);
    // By what was asked: a large slice goes on in small calls once the
    // ring is full.
    const Copy how = n >= kOwnCopyFrom ? Copy::kOwn : Copy::kMemcpy;
    n = n < space ? n : space;
    if (n == 0) return 0;
    for (size_t done = 0; done < n;) {
      size_t step = n - done < kPublishStep ? n - done : kPublishStep;
      size_t at = static_cast<size_t>(mine_ & mask_);
      size_t first = step < capacity_ - at ? step : capacity_ - at;
      copyBlock(data_ + at, src + done, first, how);
      copyBlock(data_, src + done + first, step - first, how);
      mine_ += step;
      done += step;
      header_->head.store(mine_, std::memory_order_release);
    }
    return n;
  }
  // True when there is room, or when the ring is corrupt (look now: the
  // caller finds out on its next write).
  bool hasSpace() {
    uint64_t tail;
    if (!peerTail(tail)) return true;
    return mine_ - tail < capacity_;
  }

  // Consumer side.
  // `how`: the caller knows how large the whole transfer is (Copy).
  size_t read(uint8_t* dst, size_t n, Copy how = Copy::kMemcpy) {
    uint64_t head;
    if (!peerHead(head)) return 0;
    size_t avail = static_cast<size_t>(head - mine_);
    n = n < avail ? n : avail;
    take(dst, n, how);
    return n;
  }
  // Reads exactly `n` bytes if that many are here; otherwise nothing. The
  // head is read once (a second load is another trip for a line the
  // producer may be writing).
  bool readAll(uint8_t* dst, size_t n, Copy how = Copy::kMemcpy) {
    uint64_t head;
    if (!peerHead(head) || static_cast<size_t>(head - mine_) < n) return false;
    take(dst, n, how);
    return true;
  }
  // True when there are bytes, or when the ring is corrupt (as hasSpace).
  bool hasData() {
    uint64_t head;
    if (!peerHead(head)) return true;
    return head != mine_;
  }

 private:
  // The consumer's view of the producer's head: false (and corrupt) if the
  // head claims more than a ring of bytes or went backwards.
  bool peerHead(uint64_t& head) {
    if (corrupt_) return false;
    head = header_->head.load(std::memory_order_acquire);
    uint64_t avail = head - mine_;
    if (avail > capacity_ || avail < seen_ - mine_) return fail();
    seen_ = head;
    return true;
  }
  // The producer's view of the consumer's tail: false (and corrupt) if it
  // went backwards or past our head (either way used > mine_ - seen_).
  bool peerTail(uint64_t& tail) {
    if (corrupt_) return false;
    tail = header_->tail.load(std::memory_order_acquire);
    if (mine_ - tail > mine_ - seen_) return fail();
    seen_ = tail;
    return true;
  }
  // Copies out `n` bytes the validated head covers, publishing the tail as
  // it goes.
  void take(uint8_t* dst, size_t n, Copy how) {
    for (size_t done = 0; done < n;) {
      size_t step = n - done < kPublishStep ? n - done : kPublishStep;
      size_t at = static_cast<size_t>(mine_ & mask_);
      size_t first = step < capacity_ - at ? step : capacity_ - at;
      copyBlock(dst + done, data_ + at, first, how);
      copyBlock(dst + done + first, data_, step - first, how);
      mine_ += step;
      done += step;
      header_->tail.store(mine_, std::memory_order_release);
    }
  }
  bool fail() {
    corrupt_ = true;
    return false;
  }

  RingHeader* header_{nullptr};
  uint8_t* data_{nullptr};
  size_t capacity_{0};
  size_t mask_{0};
  uint64_t mine_{0};  // our own counter: the producer's head or the consumer's tail
  uint64_t seen_{0};  // the peer's counter as last validated
  bool corrupt_{false};
};

} // namespace actorpipe::transport::shm
