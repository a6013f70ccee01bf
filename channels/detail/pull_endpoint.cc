#include <actorpipe/channels/detail/pull_endpoint.h>

#include <actorpipe/channels/detail/ack_page.h>
#include <actorpipe/runtime/detail/check.h>

#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace actorpipe::channel::detail {
namespace {

// Acknowledgement words are never freed (see the header). A process-wide
// list keeps every one reachable, so that leak checkers (LeakSanitizer) do
// not report them once their endpoint is gone.
std::atomic<uint64_t>* newAckWord() {
  static std::mutex mutex;
  static auto* words = new std::vector<std::atomic<uint64_t>*>();
  auto* word = new std::atomic<uint64_t>(0);
  std::lock_guard<std::mutex> lock(mutex);
  words->push_back(word);
  return word;
}

// Copies of large tensors are split in two, and a helper thread takes the
// second half: one core cannot saturate memory bandwidth alone (NOTES: one
// thread copies 64 MiB at ~9 GB/s, two at ~18), and while a reader copies,
// its writer waits, so the other core is free.
constexpr size_t kSplitAbove = size_t{4} << 20;

class CopyHelper {
 public:
  // One per process, never destroyed (its thread may outlive main).
  static CopyHelper& instance() {
    static CopyHelper* helper = new CopyHelper();
    return *helper;
  }
  // Runs `job` on the helper thread, starting it if it has retired.
  void run(std::function<void()> job) {
    std::lock_guard<std::mutex> guard(mutex_);
    jobs_.push_back(std::move(job));
    if (!running_) {
      running_ = true;
      std::thread([this] { serve(); }).detach();
    } else {
      ready_.notify_one();
    }
  }

 private:
  // The thread retires when idle, so that a process that copied a large
  // tensor once does not keep a thread: one that forks later (a test, a
  // launcher) then forks with no thread but its own, and its child starts
  // clean. Fork handlers keep the state consistent when a fork happens
  // anyway: the child has no helper thread and no jobs (those belonged to
  // the parent's threads).
  static constexpr std::chrono::milliseconds kIdle{200};

  CopyHelper() {
    ::pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                     [] {
                       CopyHelper& self = instance();
                       self.jobs_.clear();
                       self.running_ = false;
                       new (&self.ready_) std::condition_variable();  // its waiter is gone
                       self.mutex_.unlock();
                     });
  }
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!ready_.wait_for(lock, kIdle, [this] { return !jobs_.empty(); })) {
        running_ = false;
        return;
      }
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool running_{false};
};

// Only where this thread may run on more than one CPU: a process pinned to
// one core gains nothing from a second copying thread there.
bool mayUseTwoCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 1;
}

// Runs copy(offset, n) over [0, length), large copies in two halves at once.
Error splitCopy(size_t length, const std::function<Error(size_t, size_t)>& copy) {
  if (length < kSplitAbove || !mayUseTwoCores()) return copy(0, length);
  size_t half = (length / 2) & ~size_t(4095);
  std::atomic<bool> finished{false};
  Error second;
  CopyHelper::instance().run([&] {
    second = copy(half, length - half);
    finished.store(true, std::memory_order_release);
  });
  Error first = copy(0, half);
  while (!finished.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
  return first ? first : second;
}

// A large copy goes in pieces of this, each counted as an arrival: a
// watcher of the pipe (the remote layer's heartbeat) sees the peer's bytes
// keep coming through a copy of gigabytes that takes seconds.
constexpr size_t kCountedPiece = size_t{16} << 20;

void note(actorpipe::detail::Arrivals* arrivals, uint64_t times = 1) {
  if (arrivals != nullptr) arrivals->note(times);
}

Error readProcess(pid_t pid, void* local, uint64_t remote, size_t length, actorpipe::detail::Arrivals* arrivals) {
  size_t done = 0;
  while (done < length) {
    const size_t want = std::min(length - done, kCountedPiece);
    iovec l{static_cast<uint8_t*>(local) + done, want};
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), want};
    ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) {
      return ACTORPIPE_ERROR(SystemError, "process_vm_readv from the peer (pid " + std::to_string(pid) + ")",
                             n < 0 ? errno : EIO);
    }
    done += static_cast<size_t>(n);
    note(arrivals);
  }
  return Error();
}

void copyCounted(uint8_t* to, const uint8_t* from, size_t length, actorpipe::detail::Arrivals* arrivals) {
  for (size_t done = 0; done < length;) {
    const size_t n = std::min(length - done, kCountedPiece);
    std::memcpy(to + done, from + done, n);
    done += n;
    note(arrivals);
  }
}

// Whether the process behind `pidfd` has exited (its pid may then name
// another process by now).
bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

// One piece the sender writes for an assisted transfer, into the receiver's
// memory: the receiver must still be the process `pidfd` watches (a pid
// freed and reused would name a stranger), and `stop` unset.
bool writeProcess(pid_t pid, int pidfd, const void* local, uint64_t remote, size_t length,
                  const std::atomic<bool>& stop) {
  size_t done = 0;
  while (done < length) {  // a short write goes on where it stopped
    if (stop.load(std::memory_order_relaxed) || exited(pidfd)) return false;
    iovec l{const_cast<uint8_t*>(static_cast<const uint8_t*>(local)) + done, length - done};
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), length - done};
    ssize_t written = ::process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (written <= 0) return false;
    done += static_cast<size_t>(written);
  }
  return true;
}

}  // namespace

PullEndpoint::PullEndpoint(PullFormat format, std::string channel, size_t inlineBelow)
    : format_(format), channel_(std::move(channel)), inlineBelow_(inlineBelow), acked_(newAckWord()) {}
// acked_ is deliberately not deleted (8 bytes per pipe): see the header.

PullEndpoint::~PullEndpoint() {
  if (pidfd_ >= 0) ::close(pidfd_);
  if (assistPage_ != nullptr) ::munmap(assistPage_, kAckPageSize);
  if (assistFd_ >= 0) ::close(assistFd_);
  if (peerAssist_ != nullptr) ::munmap(peerAssist_, kAckPageSize);
}

void PullEndpoint::link(const std::shared_ptr<PullEndpoint>& a, const std::shared_ptr<PullEndpoint>& b) {
  for (auto [self, other] : {std::pair{a, b}, std::pair{b, a}}) {
    std::lock_guard<std::mutex> guard(self->peerMutex_);
    self->peer_ = other;
    self->linked_ = true;
  }
}

void PullEndpoint::attach(actorpipe::detail::Loop& loop) {
  loop_ = &loop;
  loop_->addPoller(this);
  polled_ = true;
}

void PullEndpoint::setPeerProcess(actorpipe::detail::PeerProcessLookup lookup) { lookup_ = std::move(lookup); }

std::string PullEndpoint::send(const void* ptr, size_t length, done_fn done) {
  // Before the lock: it may ask the connection who the peer is.
  uint64_t assist = offerAssist(length);
  std::unique_lock<std::mutex> lock(mutex_);
  if (assistRefused_) assist = 0;
  if (error_) {
    Error e = error_;
    lock.unlock();  // the callback may call us again
    done(e);
    return std::string();
  }
  PullDescriptor d;
  d.seq = nextSeq_++;
  d.length = length;
  d.address = reinterpret_cast<uintptr_t>(ptr);
  d.ack = reinterpret_cast<uintptr_t>(acked_);
  d.assist = assist;
  pending_.push_back({d.seq, ptr, length, false, std::move(done)});
  if (d.assist != 0 && !helperRunning_) {
    helperRunning_ = true;
    std::thread([self = shared_from_this()] { self->serveAssists(); }).detach();
  }
  return formatPullDescriptor(d, format_);
}

uint64_t PullEndpoint::offerAssist(size_t length) {
  if (format_ != PullFormat::kCrossProcess || length < kAssistAbove) return 0;
  // The peer's identity and the page are bound on the loop thread (recv's
  // state); the helper thread, started after, only reads them.
  if (loop_ != nullptr && !loop_->inLoop()) return 0;
  if (bindPeerProcess()) return 0;  // the read will say why
  if (assistPage_ == nullptr) {
    void* page = nullptr;
    if (makeAckPage(assistFd_, page, "cma-assist")) return 0;  // the receiver reads alone
    assistPage_ = new (page) AssistPage{};
  }
  return static_cast<uint64_t>(assistFd_) + 1;
}

bool PullEndpoint::assistWanted() const {
  if (error_ || assistRefused_) return false;
  for (const auto& p : pending_) {
    if (p.length >= kAssistAbove && !p.assisted) return true;
  }
  return false;
}

// The sender's helper thread: serves the receiver's offers while large
// transfers are pending (cma_assist.h).
void PullEndpoint::serveAssists() {
  AssistPage& page = *assistPage_;
  for (;;) {
    uint32_t state = page.state.load(std::memory_order_acquire);
    if (state == AssistPage::kOffered) {
      // Claimed under the lock that poll() takes to retire transfers: an
      // honest receiver acknowledges only after it failed to take its offer
      // back, so the transfer it offered is still pending when the claim
      // succeeds, and stays (assisting) until the help ends.
      std::unique_lock<std::mutex> lock(mutex_);
      if (!assistWanted()) {  // closed, refused, or nothing left to help: no claim
        helperRunning_ = false;
        return;
      }
      if (!page.state.compare_exchange_strong(state, AssistPage::kClaimed, std::memory_order_acq_rel)) continue;
      const Assisted outcome = assist(page, lock);
      if (outcome == Assisted::kRefused) assistRefused_ = true;
      lock.unlock();
      page.state.store(outcome == Assisted::kWrote ? AssistPage::kDone : AssistPage::kFailed,
                       std::memory_order_release);
      futexWake(page.state);
      // On to the check below, after every offer: a peer that offers again
      // and again (the page is its to write) must not keep this thread
      // going once nothing is wanted, or after the close.
      state = page.state.load(std::memory_order_acquire);
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!assistWanted()) {
        helperRunning_ = false;
        return;
      }
    }
    if (state == AssistPage::kOffered) continue;  // the next offer came already: no wait (its wake is gone)
    futexWait(page.state, state, std::chrono::milliseconds(20));
  }
}

PullEndpoint::Assisted PullEndpoint::assist(AssistPage& page, std::unique_lock<std::mutex>& lock) {
  // Read once: the peer may change them under us.
  const uint64_t seq = page.seq.load(std::memory_order_relaxed);
  const uint64_t dst = page.dst.load(std::memory_order_relaxed);
  const uint64_t length = page.length.load(std::memory_order_relaxed);
  const uint8_t* from = nullptr;
  if (error_) return Assisted::kFailed;
  for (auto& p : pending_) {
    if (p.seq != seq) continue;
    if (p.assisted || p.length != length || assistPieces(length) > 0xffffffffu) return Assisted::kRefused;
    p.assisting = p.assisted = true;
    from = static_cast<const uint8_t*>(p.ptr);
    break;
  }
  if (from == nullptr) return Assisted::kRefused;  // no such transfer pending
  lock.unlock();  // the writes below may block (the receiver chooses where they go)
  const uint64_t pieces = assistPieces(length);
  bool ok = true;
  uint64_t wrote = 0;
  // At most the transfer's pieces, whatever the cursor says; a cursor that
  // keeps moving under us (only a peer's doing) ends the help.
  uint64_t lost = 0;
  while (ok && wrote < pieces && !closing_.load(std::memory_order_relaxed)) {
    uint64_t cursor = page.cursor.load(std::memory_order_acquire);
    const uint64_t front = AssistPage::front(cursor), back = AssistPage::back(cursor);
    if (front >= back || back > pieces) break;  // all taken (or a cursor we do not believe)
    if (!page.cursor.compare_exchange_weak(cursor, AssistPage::pack(front, back - 1), std::memory_order_acq_rel)) {
      if (++lost > kAssistLostRaces + pieces) break;
      continue;
    }
    const uint64_t offset = (back - 1) * kAssistPiece;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kAssistPiece, length - offset));
    ok = writeProcess(peerPid_, pidfd_, from + offset, dst + offset, n, closing_);
    if (ok) {
      page.written.fetch_add(1, std::memory_order_release);
      countAssisted(n);
    }
    ++wrote;
  }
  lock.lock();
  for (auto& p : pending_) {
    if (p.seq == seq) p.assisting = false;
  }
  return ok ? Assisted::kWrote : Assisted::kFailed;
}

void PullEndpoint::recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) {
  PullDescriptor d;
  if (auto e = parsePullDescriptor(descriptor, format_, channel_, d)) return done(e);
  if (d.length != length) {
    return done(ACTORPIPE_ERROR(ProtocolError, channel_ + " descriptor announces " + std::to_string(d.length) +
                                                   " bytes for a tensor of " + std::to_string(length)));
  }
  if (d.seq != expectedSeq_) {
    return done(ACTORPIPE_ERROR(ProtocolError, channel_ + " descriptor names transfer " + std::to_string(d.seq) +
                                                   " where " + std::to_string(expectedSeq_) + " comes next"));
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (error_) return done(error_);
  }
  Error e = format_ == PullFormat::kInProcess ? readLinked(d, ptr, length) : readPeerProcess(d, ptr, length);
  if (!e) ++expectedSeq_;
  done(e);
}

Error PullEndpoint::readLinked(const PullDescriptor& d, void* ptr, size_t length) {
  std::shared_ptr<PullEndpoint> sender;
  bool linked;
  {
    std::lock_guard<std::mutex> guard(peerMutex_);
    sender = peer_.lock();
    linked = linked_;
  }
  if (!sender) {
    return linked ? ACTORPIPE_ERROR(PipeClosedError)
                  : ACTORPIPE_ERROR(ProtocolError, channel_ + ": the peer is not an endpoint of this process");
  }
  std::lock_guard<std::mutex> guard(sender->mutex_);
  if (sender->error_) return sender->error_;
  for (auto& p : sender->pending_) {
    if (p.seq != d.seq) continue;
    if (p.read || p.length != length) break;
    // Under the sender's mutex: it cannot fail this transfer (and its owner
    // free the memory) while we copy.
    auto* from = static_cast<const uint8_t*>(p.ptr);
    auto* arrivals = arrivals_.get();
    splitCopy(length, [&](size_t offset, size_t n) {
      copyCounted(static_cast<uint8_t*>(ptr) + offset, from + offset, n, arrivals);
      return Error();
    });
    p.read = true;
    sender->acked_->store(d.seq, std::memory_order_release);
    return Error();
  }
  return ACTORPIPE_ERROR(ProtocolError, channel_ + " descriptor names no pending transfer of " +
                                            std::to_string(length) + " bytes (transfer " + std::to_string(d.seq) + ")");
}

Error PullEndpoint::bindPeerProcess() {
  if (bound_) return bindError_;
  bound_ = true;
  auto peer = lookup_ ? lookup_() : std::nullopt;
  if (!peer || peer->pid <= 0) {
    bindError_ = ACTORPIPE_ERROR(ProtocolError, channel_ + ": the transport cannot tell which process the peer is");
  } else if (peer->uid != ::geteuid()) {
    bindError_ = ACTORPIPE_ERROR(ProtocolError, channel_ + ": the peer process runs as uid " +
                                                    std::to_string(peer->uid) + ", this one as " +
                                                    std::to_string(::geteuid()));
  } else {
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, peer->pid, 0));
    if (pidfd_ < 0) {
      bindError_ = ACTORPIPE_ERROR(SystemError, "pidfd_open of the peer (pid " + std::to_string(peer->pid) + ")", errno);
    } else {
      peerPid_ = peer->pid;
    }
  }
  return bindError_;
}

AssistPage* PullEndpoint::peerAssistPage(uint64_t fd) {
  if (peerAssistTried_) return fd == peerAssistFd_ ? peerAssist_ : nullptr;
  peerAssistTried_ = true;
  peerAssistFd_ = fd;
  void* page = nullptr;
  int pidfd = -1;
  if (mapPeerAckPage(lookup_ ? lookup_() : std::nullopt, fd, page, pidfd, "cma assist")) {
    return nullptr;  // read alone (the page was the peer's offer, not a need)
  }
  ::close(pidfd);  // pidfd_ watches the same process
  peerAssist_ = static_cast<AssistPage*>(page);
  return peerAssist_;
}

Error PullEndpoint::readAssisted(AssistPage& page, const PullDescriptor& d, void* ptr, size_t length) {
  auto* to = static_cast<uint8_t*>(ptr);
  const uint64_t pieces = assistPieces(length);
  auto copy = [&](uint64_t first, uint64_t end) {  // pieces [first, end) by ourselves
    const uint64_t from = first * kAssistPiece, to_ = std::min<uint64_t>(end * kAssistPiece, length);
    return from >= to_ ? Error() : readProcess(peerPid_, to + from, d.address + from, to_ - from, arrivals_.get());
  };
  const uint32_t before = page.state.load(std::memory_order_acquire);
  if ((before != AssistPage::kIdle && before != AssistPage::kDone && before != AssistPage::kFailed) ||
      pieces > 0xffffffffu) {
    return copy(0, pieces);  // the sender is still in an offer (or the page is garbage): alone
  }
  page.seq.store(d.seq, std::memory_order_relaxed);
  page.dst.store(reinterpret_cast<uintptr_t>(to), std::memory_order_relaxed);
  page.length.store(length, std::memory_order_relaxed);
  page.written.store(0, std::memory_order_relaxed);
  page.cursor.store(AssistPage::pack(0, pieces), std::memory_order_relaxed);
  page.state.store(AssistPage::kOffered, std::memory_order_release);
  futexWake(page.state);
  // Front pieces, each taken by our own compare-and-swap.
  uint64_t next = 0;
  uint64_t lost = 0;
  Error error;
  while (!error && next < pieces) {
    uint64_t cursor = AssistPage::pack(next, AssistPage::back(page.cursor.load(std::memory_order_acquire)));
    if (AssistPage::back(cursor) <= next) break;  // met the sender's pieces
    if (!page.cursor.compare_exchange_weak(cursor, AssistPage::pack(next + 1, AssistPage::back(cursor)),
                                           std::memory_order_acq_rel)) {
      // Moved under us, or moving without end: the rest is the sender's.
      if (AssistPage::front(cursor) != next || ++lost > kAssistLostRaces + pieces) break;
      continue;
    }
    error = copy(next, next + 1);
    ++next;
  }
  if (error || next < pieces) {
    // Stopped early (an error, or a cursor moved under us): take what the
    // sender has not taken yet, so that it writes no more than the piece it
    // may be writing now (the wait below is bounded for one piece).
    uint64_t cursor = page.cursor.load(std::memory_order_acquire);
    for (uint64_t tries = 0; tries < kAssistLostRaces; ++tries) {
      const uint64_t back = AssistPage::back(cursor);
      if (AssistPage::front(cursor) >= back ||
          page.cursor.compare_exchange_weak(cursor, AssistPage::pack(back, back), std::memory_order_acq_rel)) {
        break;
      }
    }
    if (!error) {
      // What we took back is ours to copy: from `next` to where the sender's
      // pieces start.
      const uint64_t start = std::min<uint64_t>(AssistPage::back(page.cursor.load(std::memory_order_acquire)), pieces);
      if (start > next) {
        error = copy(next, start);
        next = start;
      }
    }
  }
  const uint64_t share = pieces - next;  // the sender's pieces (or left by our error)
  if (share == 0 || error) {
    uint32_t offered = AssistPage::kOffered;
    if (page.state.compare_exchange_strong(offered, AssistPage::kIdle, std::memory_order_acq_rel)) {
      return error ? error : Error();  // the sender never came: nothing to wait for
    }
    if (share == 0) return error;  // it came, found nothing to take, and will say Done
  }
  // The sender writes into our memory: report nothing until it is done,
  // it died, or the bound passed. Once the cursor met, an honest sender has
  // at most one piece left to write (it takes one, writes it, takes the
  // next): the bound is for that piece, not for the share.
  const auto bound = kAssistWait;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  uint32_t state;
  // The sender's pieces count as they arrive; the page is the peer's to
  // write, so no more than its share.
  uint64_t counted = 0;
  auto countWritten = [&] {
    const uint64_t written = std::min<uint64_t>(page.written.load(std::memory_order_relaxed), share);
    if (written > counted) note(arrivals_.get(), written - counted);
    counted = std::max(counted, written);
  };
  while ((state = page.state.load(std::memory_order_acquire)) == AssistPage::kClaimed ||
         state == AssistPage::kOffered) {
    if (exited(pidfd_)) return ACTORPIPE_ERROR(EOFError);
    countWritten();
    if (std::chrono::steady_clock::now() > deadline) {
      return ACTORPIPE_ERROR(TimeoutError, "cma: the peer's share of transfer " + std::to_string(d.seq),
                             static_cast<long long>(bound.count()));
    }
    futexWait(page.state, state, std::chrono::milliseconds(1));
  }
  countWritten();
  if (error) return error;
  if (state == AssistPage::kDone && page.written.load(std::memory_order_acquire) >= share) return Error();
  return copy(next, pieces);  // failed (or said so falsely): the share is ours
}

Error PullEndpoint::readPeerProcess(const PullDescriptor& d, void* ptr, size_t length) {
  if (auto e = bindPeerProcess()) return e;
  AssistPage* page = length >= kAssistAbove && d.assist != 0 ? peerAssistPage(d.assist - 1) : nullptr;
  auto* arrivals = arrivals_.get();  // the copy helper counts through it too
  Error e = page != nullptr ? readAssisted(*page, d, ptr, length)
                            : splitCopy(length, [&](size_t offset, size_t n) {
                                return readProcess(peerPid_, static_cast<uint8_t*>(ptr) + offset, d.address + offset, n,
                                                   arrivals);
                              });
  if (e) return e;
  if (exited(pidfd_)) return ACTORPIPE_ERROR(EOFError);  // the peer process exited
  // Acknowledge before reporting: see the header. An aligned 8-byte write
  // lands whole: the sender's atomic load sees the old or the new value.
  uint64_t value = d.seq;
  iovec l{&value, sizeof(value)};
  iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(d.ack)), sizeof(value)};
  if (::process_vm_writev(peerPid_, &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof(value))) {
    return ACTORPIPE_ERROR(SystemError, "process_vm_writev to the peer (pid " + std::to_string(peerPid_) + ")", errno);
  }
  return Error();
}

bool PullEndpoint::poll() {
  uint64_t acked = acked_->load(std::memory_order_acquire);
  // A vector: an empty one allocates nothing, and this runs on every turn
  // of a polling loop (an empty deque allocated and freed its map there).
  std::vector<Pending> finished;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // One the helper writes from stays until it is done (a peer may
    // acknowledge early: its user must not free that memory yet).
    while (!pending_.empty() && pending_.front().seq <= acked && !pending_.front().assisting) {
      finished.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }
  for (auto& p : finished) p.done(Error());
  return !finished.empty();
}

bool PullEndpoint::prepareToSleep() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!pending_.empty() && loop_ != nullptr && wakeTimer_ == 0) {
    // The peer's acknowledgement rings no bell: look again soon.
    wakeTimer_ = loop_->after(std::chrono::milliseconds(1), [] {});
  }
  return true;
}

void PullEndpoint::awake() {
  if (wakeTimer_ != 0) {
    loop_->cancel(wakeTimer_);
    wakeTimer_ = 0;
  }
}

void PullEndpoint::close(const Error& reason) {
  if (loop_ != nullptr && !loop_->inLoop()) {
    // Our poller registration belongs to the loop thread.
    auto self = shared_from_this();
    if (loop_->post([self, reason] { self->closeInLoop(reason); })) return;
  }
  closeInLoop(reason);
}

void PullEndpoint::closeInLoop(const Error& reason) {
  ACTORPIPE_DCHECK(loop_ == nullptr || loop_->ownsState());
  std::deque<Pending> failed;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (error_) return;
    error_ = reason;  // no new help starts
    // The helper stops at its next piece; never waited for here (the
    // receiver picks where the helper writes and could make that write
    // block for as long as it likes). A transfer failed now may still be
    // read by the helper until that piece ends, as the pipe that closes us
    // reports its writes failed at once anyway (cma_assist.h).
    closing_.store(true, std::memory_order_relaxed);
    failed.swap(pending_);
  }
  if (polled_) {
    awake();
    loop_->removePoller(this);
    polled_ = false;
  }
  for (auto& p : failed) p.done(reason);
}

} // namespace actorpipe::channel::detail
