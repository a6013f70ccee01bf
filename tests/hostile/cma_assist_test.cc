// cma's two-ended copy (channels/detail/cma_assist.h): an honest pair, then
// each side attacked by a forged other side in another process, writing the
// shared page and the descriptor as it likes. Endpoints are driven directly
// (no Context, no loop): recv() runs inline, the sender polls by hand.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include <actorpipe/channels/detail/ack_page.h>
#include <actorpipe/channels/detail/cma_assist.h>
#include <actorpipe/channels/detail/pull_descriptor.h>
#include <actorpipe/channels/detail/pull_endpoint.h>

#include "../support/harness.h"

using namespace actorpipe;
using namespace actorpipe::channel::detail;
using namespace testing;
using namespace std::chrono_literals;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::shared_ptr<PullEndpoint> makeEndpoint(pid_t peer) {
  auto endpoint = std::make_shared<PullEndpoint>(PullFormat::kCrossProcess, "cma", 64 * 1024);
  // The kernel's word on the peer, as the pipe gives it (SO_PEERCRED): here
  // the pid fork() returned.
  endpoint->setPeerProcess([peer] { return actorpipe::detail::PeerProcess{peer, ::geteuid()}; });
  return endpoint;
}

uint8_t bytePattern(size_t i, int seed) { return static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 12)) & 0xff); }

// The sender's side, run in a child: sends `length` bytes of pattern `seed`
// followed by a secret the peer must never get, prints the descriptor, and
// polls until the transfer completes or `wait` passes; reports "done <error>
// <bytes it wrote for the peer>". With `second`, another large transfer
// stays pending behind it (so the helper thread stays up: a second offer of
// the first transfer is answered, not ignored).
int honestSender(Child& self, size_t length, int seed, std::chrono::milliseconds wait, bool second = false) {
  std::vector<uint8_t> memory(length + kMiB, 0x5e);  // the tail: the secret
  for (size_t i = 0; i < length; ++i) memory[i] = bytePattern(i, seed);
  std::vector<uint8_t> more(second ? kAssistAbove : 0, 0x33);
  auto endpoint = makeEndpoint(::getppid());
  std::atomic<bool> finished{false};
  std::string result = "pending";
  std::string descriptor = endpoint->send(memory.data(), length, [&](const Error& e) {
    result = e ? e.what() : "ok";
    finished = true;
  });
  if (second) endpoint->send(more.data(), more.size(), [](const Error&) {});
  std::this_thread::sleep_for(50ms);  // its helper thread is waiting by now
  self.send(descriptor);
  for (auto until = std::chrono::steady_clock::now() + wait; !finished && std::chrono::steady_clock::now() < until;) {
    endpoint->poll();
    std::this_thread::sleep_for(1ms);
  }
  endpoint->close(ACTORPIPE_ERROR(PipeClosedError));
  self.send("done " + result + " " + std::to_string(assistedBytes()));
  return 0;
}

PullDescriptor parsed(const std::string& text) {
  PullDescriptor d;
  REQUIRE_MESSAGE(!parsePullDescriptor(text, PullFormat::kCrossProcess, "cma", d), text);
  return d;
}

// Waits while the page says `state`.
uint32_t waitWhile(AssistPage& page, uint32_t state, std::chrono::milliseconds bound = 10s) {
  auto until = std::chrono::steady_clock::now() + bound;
  uint32_t now;
  while ((now = page.state.load()) == state && std::chrono::steady_clock::now() < until) {
    futexWait(page.state, state, 1ms);
  }
  return now;
}

}  // namespace

// Whether the sender's helper takes its half is a race it may lose on a
// loaded machine (it must wake before the receiver finishes its own half;
// then the receiver reads everything, rightly): every transfer must arrive
// right, and the sender must have helped in at least one of them (more
// tries of 64 MiB, whose copy gives it time, if none of the first did).
TEST_CASE("cma assist: both ends copy large transfers, every byte right") {
  std::vector<size_t> lengths{kAssistAbove, 8 * kMiB + 4097, 16 * kMiB + 1};
  uint64_t helpedInAll = 0;
  for (size_t n = 0; n < lengths.size(); ++n) {
    const size_t length = lengths[n];
    CAPTURE(length);
    Child sender = Child::spawn([length](Child& self) { return honestSender(self, length, 3, 10s); });
    const std::string text = sender.receive();
    CHECK(parsed(text).assist != 0);  // offered from 4 MiB up
    std::vector<uint8_t> into(length + 4096, 0xa7);
    auto endpoint = makeEndpoint(sender.pid());
    Error got = ACTORPIPE_ERROR(LogicError, "not called");
    endpoint->recv(text, into.data(), length, [&](const Error& e) { got = e; });
    CHECK_MESSAGE(!got, got.what());
    size_t wrong = 0;
    for (size_t i = 0; i < length; ++i) wrong += into[i] != bytePattern(i, 3);
    CHECK(wrong == 0);
    for (size_t i = length; i < into.size(); ++i) wrong += into[i] != 0xa7;
    CHECK(wrong == 0);  // nothing past the allocation's length
    std::string report = sender.receive();
    CAPTURE(report);
    unsigned long long helped = 0;
    char status[32] = {0};
    REQUIRE(std::sscanf(report.c_str(), "done %31s %llu", status, &helped) == 2);
    CHECK(std::string(status) == "ok");
    CHECK(helped <= length);  // a late receiver may leave it every piece
    helpedInAll += helped;
    CHECK(sender.wait() == 0);
    endpoint->close(ACTORPIPE_ERROR(PipeClosedError));
    if (n + 1 == lengths.size() && helpedInAll == 0 && lengths.size() < 8) lengths.push_back(64 * kMiB + 1);
  }
  CHECK(helpedInAll > 0);  // the sender wrote pieces
}

namespace {

// A forged receiver's view of an honest sender's page.
struct Attacker {
  Child sender;
  PullDescriptor d;
  void* mapped{nullptr};
  int pidfd{-1};
  std::vector<uint8_t> into;

  Attacker(size_t length, int seed)
      : sender(Child::spawn([length, seed](Child& self) { return honestSender(self, length, seed, 20s, true); })),
        into(length + 2 * kMiB, 0xa7) {
    d = parsed(sender.receive());
    REQUIRE(d.assist != 0);
    REQUIRE(!mapPeerAckPage(actorpipe::detail::PeerProcess{sender.pid(), ::geteuid()}, d.assist - 1, mapped, pidfd,
                            "cma assist"));
  }
  ~Attacker() {
    ::munmap(mapped, kAckPageSize);
    ::close(pidfd);
  }
  AssistPage& page() { return *static_cast<AssistPage*>(mapped); }
  // An offer as the attacker likes it, answered (or not) within `bound`.
  uint32_t offer(uint64_t seq, uint64_t length, uint64_t cursor, std::chrono::milliseconds bound = 10s) {
    page().seq = seq;
    page().dst = reinterpret_cast<uintptr_t>(into.data());
    page().length = length;
    page().written = 0;
    page().cursor = cursor;
    page().state.store(AssistPage::kOffered);
    futexWake(page().state);
    uint32_t s = waitWhile(page(), AssistPage::kOffered, bound);
    if (s == AssistPage::kClaimed) s = waitWhile(page(), AssistPage::kClaimed);
    page().state.store(AssistPage::kIdle);
    return s;
  }
  bool untouched(size_t from, size_t to) const {
    size_t changed = 0;
    for (size_t i = from; i < to; ++i) changed += into[i] != 0xa7;
    return changed == 0;
  }
  // Acknowledged as a receiver would: the sender's write completes.
  std::string acknowledge() {
    uint64_t value = d.seq;
    iovec l{&value, sizeof(value)};
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(d.ack)), sizeof(value)};
    REQUIRE(::process_vm_writev(sender.pid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(sizeof(value)));
    std::string report = sender.receive();
    CHECK(sender.wait() == 0);
    return report;
  }
};

}  // namespace

TEST_CASE("cma assist: a receiver gets only the transfer it was sent, once, into its own process") {
  const size_t length = 8 * kMiB;
  const uint64_t pieces = length / kAssistPiece;
  Attacker a(length, 5);
  // Its own transfer, back half: written, exactly there.
  CHECK(a.offer(a.d.seq, length, AssistPage::pack(pieces / 2, pieces)) == AssistPage::kDone);
  CHECK(a.page().written.load() == pieces / 2);
  size_t wrong = 0;
  for (size_t i = length / 2; i < length; ++i) wrong += a.into[i] != bytePattern(i, 5);
  CHECK(wrong == 0);
  CHECK(a.untouched(0, length / 2));
  CHECK(a.untouched(length, a.into.size()));
  CHECK(a.offer(a.d.seq, length, AssistPage::pack(0, pieces)) == AssistPage::kFailed);  // once per transfer
  CHECK(a.untouched(0, length / 2));
  CHECK(a.acknowledge() == "done ok " + std::to_string(length / 2));
}

TEST_CASE("cma assist: an offer no honest receiver makes is refused and ends the help") {
  // The page is the receiver's to write: one that offered again and again
  // kept the sender's helper thread busy for as long as it liked (after the
  // pipe's close too). The first bad offer is the last one answered.
  const size_t length = 8 * kMiB;
  const uint64_t pieces = length / kAssistPiece;
  struct Bad {
    const char* what;
    int64_t seqDelta;
    uint64_t length;
    uint64_t cursor;
  };
  for (const Bad& bad : {Bad{"no such transfer", 7, length, AssistPage::pack(0, pieces)},
                         Bad{"the secret after it too", 0, length + kMiB, AssistPage::pack(0, pieces + 1)},
                         Bad{"another length", 0, 0, 0}}) {
    CAPTURE(bad.what);
    Attacker a(length, 5);
    CHECK(a.offer(a.d.seq + bad.seqDelta, bad.length, bad.cursor) == AssistPage::kFailed);
    // Its own transfer now: nobody takes the offer, nothing is written.
    CHECK(a.offer(a.d.seq, length, AssistPage::pack(0, pieces), 300ms) == AssistPage::kOffered);
    CHECK(a.untouched(0, a.into.size()));
    CHECK(a.acknowledge() == "done ok 0");
  }
}

TEST_CASE("cma assist: a cursor past the transfer's pieces gets nothing written") {
  const size_t length = 8 * kMiB;
  const uint64_t pieces = length / kAssistPiece;
  Attacker a(length, 6);
  CHECK(a.offer(a.d.seq, length, AssistPage::pack(0, pieces + 4)) == AssistPage::kDone);  // taken: nothing
  CHECK(a.page().written.load() == 0);
  CHECK(a.untouched(0, a.into.size()));
  CHECK(a.acknowledge() == "done ok 0");
}

namespace {

// A forged sender: its own page and memory, a descriptor naming them, and
// `act` on the page once the receiver offers.
// kStealsFront moves the receiver's front two pieces on and takes the last
// two, writes those and says Done; kClaimsOnly takes the offer and nothing
// else, and its memory ends one piece early (the receiver's own read of it
// fails).
enum class Forged { kHolds, kDies, kRefuses, kNeverAnswers, kStealsFront, kClaimsOnly };

Child spawnForgedSender(size_t length, Forged how) {
  return Child::spawn([length, how](Child& self) {
    int fd = -1;
    void* mapped = nullptr;
    CHILD_CHECK(!makeAckPage(fd, mapped, "cma-assist"));
    auto& page = *new (mapped) AssistPage{};
    auto* memory = static_cast<uint8_t*>(
        ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    CHILD_CHECK(memory != MAP_FAILED);
    for (size_t i = 0; i < length; ++i) memory[i] = bytePattern(i, 9);
    if (how == Forged::kClaimsOnly) CHILD_CHECK(::munmap(memory + length - kAssistPiece, kAssistPiece) == 0);
    static std::atomic<uint64_t> ack{0};
    PullDescriptor d{1, length, reinterpret_cast<uintptr_t>(memory), reinterpret_cast<uintptr_t>(&ack),
                     static_cast<uint64_t>(fd) + 1};
    self.send(formatPullDescriptor(d, PullFormat::kCrossProcess));
    if (how != Forged::kNeverAnswers) {
      // Take the offer, unless the receiver has read everything first (its
      // acknowledgement then comes before any offer we could see).
      bool claimed = false;
      for (int i = 0; i < 20000 && ack.load() != 1 && !claimed; ++i) {
        uint32_t offered = AssistPage::kOffered;
        claimed = page.state.compare_exchange_strong(offered, AssistPage::kClaimed);
        if (!claimed) futexWait(page.state, page.state.load(), 1ms);
      }
      if (!claimed) {
        self.send("late");
        return 0;
      }
      if (how == Forged::kClaimsOnly) {
        self.send("claimed");
        ::pause();  // until killed
      }
      if (how == Forged::kStealsFront) {
        // Two pieces moved past the receiver's front, two taken from the back.
        uint64_t cursor = page.cursor.load();
        uint64_t front, back;
        do {
          front = AssistPage::front(cursor);
          back = AssistPage::back(cursor);
        } while (front + 4 < back &&
                 !page.cursor.compare_exchange_weak(cursor, AssistPage::pack(front + 2, back - 2)));
        uint32_t written = 0;
        if (front + 4 < back) {
          const uint64_t from = (back - 2) * kAssistPiece;
          const size_t n = std::min<size_t>(2 * kAssistPiece, length - from);
          iovec l{memory + from, n};
          iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(page.dst.load() + from)), n};
          CHILD_CHECK(::process_vm_writev(::getppid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(n));
          written = 2;
        }
        page.written.store(written);
        page.state.store(AssistPage::kDone);
        futexWake(page.state);
        self.send(written != 0 ? "claimed" : "late");
        for (int i = 0; i < 20000 && ack.load() != 1; ++i) std::this_thread::sleep_for(1ms);
        return ack.load() == 1 ? 0 : 4;
      }
      // Every piece the receiver has not taken yet becomes "ours".
      uint64_t cursor = page.cursor.load();
      while (!page.cursor.compare_exchange_weak(cursor, AssistPage::pack(AssistPage::front(cursor),
                                                                         AssistPage::front(cursor)))) {
      }
      self.send("claimed");
      if (how == Forged::kDies) {
        std::this_thread::sleep_for(100ms);
        ::_exit(0);
      }
      if (how == Forged::kHolds) ::pause();  // until killed
      page.state.store(AssistPage::kFailed);
      futexWake(page.state);
    }
    for (int i = 0; i < 20000 && ack.load() != 1; ++i) std::this_thread::sleep_for(1ms);
    return ack.load() == 1 ? 0 : 4;
  });
}

struct Outcome {
  Error error;
  std::chrono::milliseconds took;
  bool right;
};

Outcome receiveFrom(Child& sender, size_t length) {
  const std::string text = sender.receive();
  auto endpoint = makeEndpoint(sender.pid());
  std::vector<uint8_t> into(length, 0xa7);
  Error got = ACTORPIPE_ERROR(LogicError, "not called");
  auto start = std::chrono::steady_clock::now();
  endpoint->recv(text, into.data(), length, [&](const Error& e) { got = e; });
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  size_t wrong = 0;
  for (size_t i = 0; i < length; ++i) wrong += into[i] != bytePattern(i, 9);
  endpoint->close(ACTORPIPE_ERROR(PipeClosedError));
  return {got, took, wrong == 0};
}

}  // namespace

// The forged sender must take the offer before the receiver, copying from
// the front, has taken every piece: a race the receiver may win (then it
// reads the whole transfer itself, rightly). Each case tries a few times
// with a large transfer and requires the branch it is about at least once.
TEST_CASE("cma assist: a sender that takes pieces and never writes them holds a read for a bounded time") {
  const size_t length = 64 * kMiB;
  bool seen = false;
  for (int attempt = 0; attempt < 8 && !seen; ++attempt) {
    Child sender = spawnForgedSender(length, Forged::kHolds);
    Outcome o = receiveFrom(sender, length);
    sender.kill(SIGKILL);
    sender.wait();
    if (!o.error) {
      CHECK(o.right);  // it came too late: read whole
      continue;
    }
    seen = true;
    CHECK_MESSAGE(o.error.isOfType<TimeoutError>(), o.error.what());
    CHECK(o.took >= kAssistWait);
    CHECK(o.took < kAssistWait + 5s);
  }
  CHECK(seen);
}

TEST_CASE("cma assist: a sender that dies with pieces taken fails the read at once") {
  const size_t length = 64 * kMiB;
  bool seen = false;
  for (int attempt = 0; attempt < 8 && !seen; ++attempt) {
    Child sender = spawnForgedSender(length, Forged::kDies);
    Outcome o = receiveFrom(sender, length);
    if (!o.error) {
      CHECK(o.right);
      sender.kill(SIGKILL);
      sender.wait();
      continue;
    }
    seen = true;
    CHECK_MESSAGE(o.error.isOfType<EOFError>(), o.error.what());
    CHECK(o.took < kAssistWait);
    sender.wait();
  }
  CHECK(seen);
}

TEST_CASE("cma assist: pieces moved past the receiver's front are taken back and copied by the receiver") {
  bool seen = false;
  for (int attempt = 0; attempt < 8 && !seen; ++attempt) {
    const size_t length = 64 * kMiB;
    Child sender = spawnForgedSender(length, Forged::kStealsFront);
    Outcome o = receiveFrom(sender, length);
    CHECK_MESSAGE(!o.error, o.error.what());
    CHECK(o.right);  // its own pieces, the two taken back, and the sender's two
    seen = sender.receive() == "claimed";
    CHECK(sender.wait() == 0);
  }
  CHECK(seen);
}

TEST_CASE("cma assist: a read whose own copy fails fails, whether or not the sender took the offer") {
  bool seen = false;
  for (int attempt = 0; attempt < 8 && !seen; ++attempt) {
    const size_t length = 64 * kMiB;
    Child sender = spawnForgedSender(length, Forged::kClaimsOnly);
    Outcome o = receiveFrom(sender, length);
    CHECK_MESSAGE(o.error.isOfType<SystemError>(), o.error.what());  // its last piece is not mapped
    sender.kill(SIGKILL);  // first: it said "claimed" by now if it took the offer at all
    sender.wait();
    seen = sender.receive() == "claimed";
  }
  CHECK(seen);
}

TEST_CASE("cma assist: a sender that refuses, or never answers, leaves the receiver to copy it all") {
  bool seen = false;
  for (int attempt = 0; attempt < 8 && !seen; ++attempt) {
    const size_t length = 64 * kMiB + 123;
    Child sender = spawnForgedSender(length, Forged::kRefuses);
    Outcome o = receiveFrom(sender, length);
    CHECK_MESSAGE(!o.error, o.error.what());
    CHECK(o.right);
    seen = sender.receive() == "claimed";  // it took pieces, then said Failed (else "late")
    sender.kill(SIGKILL);  // one that came too late still waits for an offer
    sender.wait();
  }
  CHECK(seen);
  const size_t length = 6 * kMiB + 123;
  Child silent = spawnForgedSender(length, Forged::kNeverAnswers);
  Outcome o = receiveFrom(silent, length);
  CHECK_MESSAGE(!o.error, o.error.what());
  CHECK(o.right);
  CHECK(silent.wait() == 0);  // and it was acknowledged
}

// A receiver picks where the sender's helper writes: memory whose page
// faults it serves itself (userfaultfd) can hold that write as long as it
// likes. An early acknowledgement must not complete the transfer while the
// helper writes from it, and the sender's close must not wait for the
// write (it fails the transfer at once, as the pipe above it does).
TEST_CASE("cma assist: a receiver that stalls the sender's write holds neither its close nor its loop") {
  int uffd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (uffd < 0) {
    MESSAGE("skipped: userfaultfd is not available here (" << std::strerror(errno) << ")");
    return;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  REQUIRE(::ioctl(uffd, UFFDIO_API, &api) == 0);
  const size_t length = 8 * kMiB;
  const uint64_t pieces = length / kAssistPiece;
  Child sender = Child::spawn([length](Child& self) {
    std::vector<uint8_t> memory(length);
    for (size_t i = 0; i < length; ++i) memory[i] = bytePattern(i, 8);
    auto endpoint = makeEndpoint(::getppid());
    std::atomic<bool> finished{false};
    std::string result = "pending";
    std::string descriptor = endpoint->send(memory.data(), length, [&](const Error& e) {
      result = e ? e.what() : "ok";
      finished = true;
    });
    PullDescriptor own;
    CHILD_CHECK(!parsePullDescriptor(descriptor, PullFormat::kCrossProcess, "cma", own));
    auto* ack = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<uintptr_t>(own.ack));
    std::this_thread::sleep_for(50ms);
    self.send(descriptor);
    // The receiver stalls the helper's write, then acknowledges: poll past
    // the acknowledgement.
    for (int i = 0; i < 10000 && ack->load() != own.seq; ++i) {
      endpoint->poll();
      std::this_thread::sleep_for(1ms);
    }
    for (int i = 0; i < 50; ++i) {
      endpoint->poll();
      std::this_thread::sleep_for(1ms);
    }
    self.send("before-close " + std::to_string(ack->load() == own.seq) + " " + std::to_string(finished.load()));
    auto start = std::chrono::steady_clock::now();
    endpoint->close(ACTORPIPE_ERROR(PipeClosedError));
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    self.send("closed " + std::to_string(took.count()) + " " + std::to_string(finished.load()) + " " + result);
    ::pause();  // the helper finishes its piece once the receiver lets it; killed then
    return 0;
  }, std::chrono::seconds(30));
  PullDescriptor d = parsed(sender.receive());
  void* mapped = nullptr;
  int pidfd = -1;
  REQUIRE(!mapPeerAckPage(actorpipe::detail::PeerProcess{sender.pid(), ::geteuid()}, d.assist - 1, mapped, pidfd,
                          "cma assist"));
  auto& page = *static_cast<AssistPage*>(mapped);
  void* region = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(region != MAP_FAILED);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(region);
  reg.range.len = length;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  REQUIRE(::ioctl(uffd, UFFDIO_REGISTER, &reg) == 0);
  // Whatever happens below, the stalled write goes on after 10 s: a failure
  // must not leave the child stuck in our fault (the harness would then run
  // gdb on it, which waits for that thread to stop, for ever).
  std::promise<void> cancel;
  std::thread watchdog([&, stop = cancel.get_future()]() mutable {
    stop.wait_for(10s);
    uffdio_zeropage zero{};
    zero.range = reg.range;
    ::ioctl(uffd, UFFDIO_ZEROPAGE, &zero);
  });
  auto release = [&] {
    cancel.set_value();
    watchdog.join();
  };
  // Offer the last piece only, into the stalling region.
  page.seq = d.seq;
  page.dst = reinterpret_cast<uintptr_t>(region);
  page.length = length;
  page.written = 0;
  page.cursor = AssistPage::pack(pieces - 1, pieces);
  page.state.store(AssistPage::kOffered);
  futexWake(page.state);
  pollfd p{uffd, POLLIN, 0};
  const bool faulted = ::poll(&p, 1, 5000) == 1;  // the helper's write waits on us now
  CHECK(faulted);
  uffd_msg msg{};
  if (faulted) {
    CHECK(::read(uffd, &msg, sizeof(msg)) == static_cast<ssize_t>(sizeof(msg)));
    CHECK(msg.event == UFFD_EVENT_PAGEFAULT);
    const uint64_t where = msg.arg.pagefault.address;  // a packed field: copied out first
    CHECK(where >= reinterpret_cast<uintptr_t>(region) + (pieces - 1) * kAssistPiece);
  }
  // Acknowledged early, as a hostile receiver may.
  uint64_t value = d.seq;
  iovec l{&value, sizeof(value)};
  iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(d.ack)), sizeof(value)};
  CHECK(::process_vm_writev(sender.pid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(sizeof(value)));
  CHECK(sender.receive() == "before-close 1 0");  // seen, and still not completed while written from
  std::string closed = sender.receive();
  long long closeMs = -1;
  int finishedAtClose = -1;
  CHECK_MESSAGE(std::sscanf(closed.c_str(), "closed %lld %d", &closeMs, &finishedAtClose) == 2, closed);
  CHECK(closeMs < 3000);  // the close did not wait for the stalled write (that is ~10 s: the watchdog)
  CHECK(finishedAtClose == 1);
  CHECK(closed.find("pipe closed") != std::string::npos);
  CHECK(page.state.load() == AssistPage::kClaimed);  // the write is still held
  release();
  CHECK(waitWhile(page, AssistPage::kClaimed) != AssistPage::kClaimed);  // the helper got out
  sender.kill(SIGKILL);
  sender.wait();
  ::munmap(region, length);
  ::close(uffd);
  ::munmap(mapped, kAckPageSize);
  ::close(pidfd);
}
