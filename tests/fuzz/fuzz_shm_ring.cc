// libFuzzer target shm_ring: the fuzzer plays a hostile shm peer against
// transports/shm/ring.h. Two rings live in plain heap memory of exactly the
// size a mapping would have (so AddressSanitizer flags a byte past it): one
// we produce into, one we consume from. The input is a program of steps:
//   0: the peer sets the head of our incoming ring (8 bytes, any value)
//   1: the peer sets the tail of our outgoing ring (8 bytes, any value)
//   2: the peer sets that head near where an honest one would be (2 bytes)
//   3: the peer sets that tail near where an honest one would be (2 bytes)
//   4: we read n bytes (2 bytes: n) into a buffer of exactly n bytes (n % 3
//      picks how the ring copies)
//   5: we write n bytes (2 bytes: n) from a buffer of exactly n bytes
//   6: the peer scribbles on our own counters and the capacity fields
//   7: we ask hasData() / hasSpace()
// and checks: no access out of bounds (ASan), a ring the peer broke stays
// broken and moves no byte (corrupt() is sticky), an intact ring moves
// exactly what the counters allow, and what we publish is our own count
// whatever the peer wrote over it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include <actorpipe/transports/shm/ring.h>

using actorpipe::transport::shm::Copy;
using actorpipe::transport::shm::kRingHeaderSize;
using actorpipe::transport::shm::Ring;
using actorpipe::transport::shm::RingHeader;

namespace {

#define FUZZ_ASSERT(cond)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "fuzz_shm_ring: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

struct Input {
  const uint8_t* data;
  size_t size;
  bool take(void* out, size_t n) {
    if (size < n) return false;
    std::memcpy(out, data, n);
    data += n;
    size -= n;
    return true;
  }
};

// A ring's memory as a mapping would be: header page plus data, nothing more.
struct Region {
  explicit Region(size_t capacity) : size(kRingHeaderSize + capacity) {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, size) != 0) std::abort();
    base = static_cast<uint8_t*>(p);
    std::memset(base, 0, size);
    header = new (base) RingHeader();
    header->capacity = capacity;
  }
  ~Region() {
    header->~RingHeader();
    std::free(base);
  }
  size_t size;
  uint8_t* base;
  RingHeader* header;
};

// One read or write of `n` bytes that moved `moved`, against the model: a
// broken ring (now or before) moves nothing and says so; an intact one moves
// all it has room for (`room`), and publishes our count.
void checkMove(const Ring& ring, bool valid, bool& broken, size_t n, size_t moved, size_t room, uint64_t peer,
               uint64_t& seen, uint64_t& mine, const std::atomic<uint64_t>& published) {
  FUZZ_ASSERT(moved <= n);
  if (broken || !valid) {
    FUZZ_ASSERT(ring.corrupt());
    FUZZ_ASSERT(moved == 0);
    broken = true;
    return;
  }
  FUZZ_ASSERT(!ring.corrupt());
  FUZZ_ASSERT(moved == (n < room ? n : room));
  seen = peer;
  mine += moved;
  if (moved > 0) FUZZ_ASSERT(published.load() == mine);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  uint8_t shift = 0;
  if (!in.take(&shift, 1)) return 0;
  const size_t capacity = size_t{1} << (shift % 13);  // 1 B .. 4 KiB
  Region outgoing(capacity), incoming(capacity);
  Ring producer(outgoing.base, capacity);
  Ring consumer(incoming.base, capacity);

  // What an honest model of each side says.
  uint64_t produced = 0, consumed = 0;  // our own counters
  uint64_t seenTail = 0, seenHead = 0;  // the peer's, as last accepted
  bool producerBroken = false, consumerBroken = false;
  // The protocol of ring.h, restated: a head at most one ring ahead of our
  // tail and not behind the last one seen; a tail not behind the last one
  // seen and not past our head.
  auto headValid = [&](uint64_t head) {
    return head - consumed <= capacity && head - consumed >= seenHead - consumed;
  };
  auto tailValid = [&](uint64_t tail) { return produced - tail <= produced - seenTail; };

  uint8_t op = 0;
  while (in.take(&op, 1)) {
    switch (op % 8) {
      case 0: {
        uint64_t v = 0;
        if (!in.take(&v, 8)) return 0;
        incoming.header->head.store(v);
        break;
      }
      case 1: {
        uint64_t v = 0;
        if (!in.take(&v, 8)) return 0;
        outgoing.header->tail.store(v);
        break;
      }
      case 2: {
        uint16_t d = 0;
        if (!in.take(&d, 2)) return 0;
        // Mostly within one ring ahead of us, sometimes one byte over.
        incoming.header->head.store(consumed + d % (capacity + 2));
        break;
      }
      case 3: {
        uint16_t d = 0;
        if (!in.take(&d, 2)) return 0;
        outgoing.header->tail.store(produced - d % (capacity + 2));
        break;
      }
      case 4: {
        uint16_t n = 0;
        if (!in.take(&n, 2)) return 0;
        uint64_t head = incoming.header->head.load();
        bool valid = headValid(head);
        // Each of ring.h's ways to copy (n % 3), into memory n % 16 bytes
        // past an allocation's start, exactly n bytes long.
        const size_t offset = n % 16;
        std::vector<uint8_t> dst(offset + n);
        const Copy how = n % 3 == 0 ? Copy::kMemcpy : n % 3 == 1 ? Copy::kOwn : Copy::kStreaming;
        size_t got = consumer.read(dst.data() + offset, n, how);
        checkMove(consumer, valid, consumerBroken, n, got, static_cast<size_t>(head - consumed), head, seenHead,
                  consumed, incoming.header->tail);
        break;
      }
      case 5: {
        uint16_t n = 0;
        if (!in.take(&n, 2)) return 0;
        uint64_t tail = outgoing.header->tail.load();
        bool valid = tailValid(tail);
        std::vector<uint8_t> src(n, 0xab);
        size_t put = producer.write(src.data(), n);
        checkMove(producer, valid, producerBroken, n, put, capacity - static_cast<size_t>(produced - tail), tail,
                  seenTail, produced, outgoing.header->head);
        break;
      }
      case 6: {
        uint64_t v = 0;
        if (!in.take(&v, 8)) return 0;
        incoming.header->tail.store(v);
        outgoing.header->head.store(~v);
        incoming.header->capacity = v;
        outgoing.header->capacity = v >> 1;
        break;
      }
      case 7: {
        uint64_t head = incoming.header->head.load();
        uint64_t tail = outgoing.header->tail.load();
        consumerBroken = consumerBroken || !headValid(head);
        producerBroken = producerBroken || !tailValid(tail);
        bool data = consumer.hasData();
        bool space = producer.hasSpace();
        // A broken ring answers "look now", so that its owner finds out.
        if (consumerBroken) {
          FUZZ_ASSERT(data);
        } else {
          FUZZ_ASSERT(data == (head != consumed));
          seenHead = head;
        }
        if (producerBroken) {
          FUZZ_ASSERT(space);
        } else {
          FUZZ_ASSERT(space == (produced - tail < capacity));
          seenTail = tail;
        }
        break;
      }
    }
    // Sticky, and never broken without cause.
    FUZZ_ASSERT(consumer.corrupt() == consumerBroken);
    FUZZ_ASSERT(producer.corrupt() == producerBroken);
  }
  return 0;
}
