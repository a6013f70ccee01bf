#pragma once
// cma's two-ended copy: a large tensor is copied partly by its receiver
// (process_vm_readv, as always) and partly by its sender (process_vm_writev
// into the receiver's allocation), at once, each on its own process's CPU.
// Why: a cma copy is bound by one CPU (page pinning plus the copy: ~7 GB/s
// here, against ~12 GB/s for two threads' memcpy), the sender sits idle
// until the receiver acknowledges, and processes are often pinned to one
// CPU each (the receiver's own helper thread, pull_endpoint.cc, cannot run
// on the sender's CPU).
//
// Protocol, over one shared page per sending endpoint (the sender makes it,
// a sealed memfd: ack_page.h; its fd number travels in each large
// descriptor, plus one, 0 meaning no page). The page holds one offer (the
// receiver reads transfers one at a time, in order). A transfer is cut into
// pieces of kAssistPiece; a cursor word (front | back << 32) hands them out:
// the receiver takes pieces from the front, the sender from the back, each
// by compare-and-swap, so whoever copies faster (or starts sooner) copies
// more, and a sender that wakes late still helps with what is left.
//
//   receiver: when the state is Idle, Done or Failed (the sender is not in
//             an offer): (seq, dst, length), cursor = (0, pieces),
//             written = 0, state = Offered (release), futex wake. Copies
//             front pieces until the cursor meets. Took them all: withdraws
//             (Offered -> Idle) or, if the sender came meanwhile, leaves it
//             to find nothing. Else waits while the state is Claimed; Done
//             with every piece of the sender's share written: complete;
//             anything else: it copies the sender's share itself.
//   sender:   a helper thread (alive while large transfers are pending)
//             waits on the state; Offered -> Claimed (CAS), reads (seq,
//             dst, length) once, checks them against its own pending
//             transfer, takes back pieces and writes each into the receiver,
//             counting them in `written`; then state = Done (or Failed on an
//             error), futex wake.
//
// Every word of the page is hostile to both (each process writes it):
// - A receiver can only make the sender write, into the receiver's own
//   process (the kernel's SO_PEERCRED pid, pidfd-checked before each piece),
//   bytes of a transfer the sender is sending to it anyway: seq must name a
//   pending transfer not yet acknowledged nor helped before, its length must
//   be the transfer's, a piece must lie inside it, and at most the
//   transfer's number of pieces are written whatever the cursor says. The
//   sender completes no transfer while it writes from it (a peer's early
//   acknowledgement waits), so an open pipe never hands its user back
//   memory under the write. An offer that breaks these rules is one no
//   honest receiver makes: it is answered Failed and ends the sender's help
//   on that endpoint (later transfers offer none), and the helper looks for
//   a reason to stop after every offer: a receiver that offered in a loop
//   kept it busy for as long as it liked, even after the close.
// - A receiver trusts only the pieces its own compare-and-swaps gave it; a
//   cursor moved under it (or moving without end) ends its taking, and the
//   rest is the sender's share. Once the cursor met, an honest sender has at
//   most one piece in flight: the receiver waits kAssistWait for the share
//   to be written (its loop blocked, as during its own copy), then the read
//   fails (TimeoutError); a sender that exits fails it at once (EOFError). A
//   sender that says Done without writing leaves the receiver with whatever
//   bytes it wrote: what the sender sends is its to choose anyway. A peer
//   running as our user could ptrace us; cma is chosen only between such
//   peers (cma/context.cc), and this adds no power over our memory beyond
//   that.
// - A receiver chooses where the sender writes (its own memory), so it can
//   make that write block (a userfaultfd or FUSE mapping): the helper
//   thread then waits, never the sender's loop. A close does not wait for
//   it either: it fails every transfer at once (as the pipe above reports
//   its writes failed at once when it fails), and the helper stops at the
//   end of its current piece. Until then it may still read a failed
//   transfer's memory, to send it to that same peer (which could also have
//   pulled it itself with process_vm_readv after the failure, as any cma
//   peer can: docs/architecture.md).
// - What is left: a read that timed out reports while the sender's last
//   piece may still be in its kernel copy (process_vm_writev runs to the end
//   of its piece whatever stop signal comes; only a stall inside the kernel
//   longer than kAssistWait, such as swapping under memory pressure, lands
//   bytes after the report). A receiver that stops taking pieces early (an
//   error, a cursor moved under it) first takes back what the sender has not
//   taken, so that wait is for one piece too.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace actorpipe::channel::detail {

// Transfers from this size up are copied from both ends.
constexpr size_t kAssistAbove = size_t{4} << 20;
constexpr size_t kAssistPiece = size_t{1} << 20;
// How long a receiver waits for the sender's last piece once the cursor met.
constexpr std::chrono::milliseconds kAssistWait{2000};
// Compare-and-swaps either side may lose (beyond one per piece) before it
// takes the cursor for a peer's doing and stops taking pieces.
constexpr uint64_t kAssistLostRaces = 4096;

struct AssistPage {
  enum State : uint32_t { kIdle = 0, kOffered = 1, kClaimed = 2, kDone = 3, kFailed = 4 };
  std::atomic<uint32_t> state;    // a futex word
  std::atomic<uint32_t> written;  // pieces the sender wrote in this offer
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> dst;  // the transfer's start, in the receiver
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> cursor;  // front | back << 32, in pieces

  static uint64_t pack(uint64_t front, uint64_t back) { return front | back << 32; }
  static uint64_t front(uint64_t cursor) { return cursor & 0xffffffffu; }
  static uint64_t back(uint64_t cursor) { return cursor >> 32; }
};
inline uint64_t assistPieces(uint64_t length) { return (length + kAssistPiece - 1) / kAssistPiece; }
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the page is shared between processes");

// Shared (not process-private) futex operations on a page mapped by both.
// wait returns when *word != expected, on a wake, or after `timeout`.
void futexWait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds timeout);
void futexWake(std::atomic<uint32_t>& word);

// Bytes this process wrote for its peers' reads (tests and traces).
uint64_t assistedBytes();
void countAssisted(uint64_t bytes);

}  // namespace actorpipe::channel::detail
