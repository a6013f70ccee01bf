#include <actorpipe/transports/shm/connection.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <actorpipe/transports/detail/in_loop.h>
#include <actorpipe/transports/shm/socket.h>
#include <actorpipe/runtime/detail/check.h>

namespace actorpipe::transport::shm {
namespace {

constexpr uint32_t kSetupMagic = 0x48535041;  // "APSH"
constexpr uint32_t kSetupVersion = 1;
constexpr size_t kMaxRingSize = size_t{1} << 30;
// A read this large is copied out of the ring with streaming stores
// (ring.h): it would not stay in the cache anyway, and plain stores would
// evict the ring's own lines and read each destination line before writing
// it. Measured on the 2-vCPU VM (docs/benchmarks.md): 8 MiB and larger gain
// 0.6-0.8x the time, 1 and 4 MiB (cached) lose up to 1.4x.
constexpr size_t kStreamingRead = size_t{8} << 20;

struct Setup {
  uint32_t magic;
  uint32_t version;
  uint64_t ringSize;
};

Error systemError(const std::string& what, int error = errno) {
  return ACTORPIPE_ERROR(SystemError, what, error);
}

}  // namespace

ShmConnection::ShmConnection(detail::Loop& loop, std::string peer)
    : ConnectionBase(loop, std::move(peer)) {}

ShmConnection::~ShmConnection() {
  if (outMap_ != nullptr) ::munmap(outMap_, mapSize_);
  if (inMap_ != nullptr) ::munmap(inMap_, mapSize_);
}

// --- setting up -------------------------------------------------------------

// The peer keeps its descriptors: a memfd it could shrink after we mapped it
// would turn our next access into SIGBUS, one it could grow would not match
// what we checked. So the memory must be sealed against both (which also
// means a memfd: other files cannot take those seals), and then its size is
// for good what we check here.
Error ShmConnection::mapRings(int outFd, int inFd, size_t ringSize) {
  mapSize_ = kRingHeaderSize + ringSize;
  for (int fd : {outFd, inFd}) {
    int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
      return ACTORPIPE_ERROR(ProtocolError, "shm ring not sealed");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != mapSize_) {
      return ACTORPIPE_ERROR(ProtocolError, "shm ring of unexpected size");
    }
  }
  outMap_ = ::mmap(nullptr, mapSize_, PROT_READ | PROT_WRITE, MAP_SHARED, outFd, 0);
  if (outMap_ == MAP_FAILED) {
    outMap_ = nullptr;
    return systemError("mmap");
  }
  inMap_ = ::mmap(nullptr, mapSize_, PROT_READ | PROT_WRITE, MAP_SHARED, inFd, 0);
  if (inMap_ == MAP_FAILED) {
    inMap_ = nullptr;
    return systemError("mmap");
  }
  out_ = Ring(outMap_, ringSize);
  in_ = Ring(inMap_, ringSize);
  return Error();
}

void ShmConnection::startAsClient(const std::string& name, size_t ringSize) {
  // Closed before this posted start ran (its last handle dropped on the
  // loop, say): its operations have failed; opening a socket and rings now
  // would leave them with nobody to close them.
  if (error_) return;
  self_ = shared_from_this();
  sockaddr_un address;
  socklen_t length;
  if (auto e = abstractAddress(name, address, length)) return closeInLoop(e);
  if (name.empty()) {
    return closeInLoop(ACTORPIPE_ERROR(ConnectError, peer_, "an shm address needs a name"));
  }
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return closeInLoop(systemError("socket"));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    int e = errno;
    return closeInLoop(ACTORPIPE_ERROR(ConnectError, peer_, std::strerror(e), e));
  }
  int fds[2] = {-1, -1};
  Error error;
  for (int& fd : fds) {
    fd = createMemfd("actorpipe-shm-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kRingHeaderSize + ringSize)) != 0) {
      error = systemError("memfd_create/ftruncate");
      break;
    }
    // The accepting side refuses unsealed rings (see mapRings).
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      error = systemError("fcntl(F_ADD_SEALS)");
      break;
    }
  }
  if (!error) error = mapRings(fds[0], fds[1], ringSize);
  if (!error) {
    for (Ring* ring : {&out_, &in_}) {
      RingHeader* h = ring->header();
      h->head.store(0);
      h->tail.store(0);
      h->consumerSleeping.store(0);
      h->producerWaiting.store(0);
      h->capacity = ringSize;
    }
    Setup setup{kSetupMagic, kSetupVersion, ringSize};
    // Our outgoing ring is the peer's incoming one: send it first.
    if (sendWithFds(fd_, &setup, sizeof(setup), fds, 2) != sizeof(setup)) {
      error = systemError("sendmsg");
    }
  }
  // Mapped (or failed): the descriptors are no longer needed on this side.
  for (int fd : fds) {
    if (fd >= 0) closeMemfd(fd);
  }
  if (error) return closeInLoop(error);
  ready_ = true;
  watchSocket();
}

void ShmConnection::startAsServer(int fd, size_t maxRingSize, ready_fn ready) {
  self_ = shared_from_this();
  fd_ = fd;
  maxRingSize_ = maxRingSize;
  onReady_ = std::move(ready);
  watchSocket();
  // The timer may fire after we closed and were released: it holds only a
  // weak reference, and closeInLoop cancels it anyway.
  std::weak_ptr<ShmConnection> weak = self_;
  setupTimer_ = loop_.after(kSetupTimeout, [weak] {
    if (auto self = weak.lock()) self->setupTimedOut();
  });
}

void ShmConnection::setupTimedOut() {
  setupTimer_ = 0;  // the loop has already forgotten it
  if (ready_ || error_) return;
  failSetup(ACTORPIPE_ERROR(TimeoutError, "the shm peer's setup", kSetupTimeout.count()));
}

void ShmConnection::failSetup(const Error& error) {
  auto ready = std::move(onReady_);
  onReady_ = nullptr;
  closeInLoop(error);
  if (ready) ready(error, nullptr);
}

void ShmConnection::watchSocket() {
  poll_ = new uv_poll_t;
  uv_poll_init(loop_.uv(), poll_, fd_);
  poll_->data = this;
  uv_poll_start(poll_, UV_READABLE | UV_DISCONNECT, [](uv_poll_t* handle, int status, int events) {
    static_cast<ShmConnection*>(handle->data)->onSocketEvent(status, events);
  });
  if (ready_) {
    loop_.addPoller(this);
    polled_ = true;
  }
}

void ShmConnection::receiveSetup() {
  Setup setup{};
  int fds[4];
  int count = 0;
  ssize_t n = recvWithFds(fd_, &setup, sizeof(setup), fds, count);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  Error error;
  if (n == 0) {
    error = ACTORPIPE_ERROR(EOFError);
  } else if (n < 0) {
    error = systemError("recvmsg");
  } else if (n != sizeof(setup) || count != 2 || setup.magic != kSetupMagic) {
    error = ACTORPIPE_ERROR(ProtocolError, "not an actorpipe shm peer");
  } else if (setup.version != kSetupVersion) {
    error = ACTORPIPE_ERROR(ProtocolError, "unsupported shm setup version " + std::to_string(setup.version));
  } else if (setup.ringSize == 0 || setup.ringSize > kMaxRingSize ||
             (setup.ringSize & (setup.ringSize - 1)) != 0) {
    error = ACTORPIPE_ERROR(ProtocolError, "bad shm ring size " + std::to_string(setup.ringSize));
  } else if (setup.ringSize > maxRingSize_) {
    // Two rings of the peer's choosing, mapped per connection: the peer
    // must not pick how much of our address space and page tables it costs.
    error = ACTORPIPE_ERROR(ProtocolError, "shm ring size " + std::to_string(setup.ringSize) +
                                               " exceeds this side's " + std::to_string(maxRingSize_));
  } else {
    // The peer's outgoing ring is our incoming one.
    error = mapRings(fds[1], fds[0], setup.ringSize);
    if (!error && (out_.header()->capacity != setup.ringSize || in_.header()->capacity != setup.ringSize)) {
      error = ACTORPIPE_ERROR(ProtocolError, "shm ring headers disagree with the setup");
    }
  }
  for (int i = 0; i < count; ++i) ::close(fds[i]);
  if (error) return failSetup(error);
  if (setupTimer_ != 0) {
    loop_.cancel(setupTimer_);
    setupTimer_ = 0;
  }
  auto ready = std::move(onReady_);
  onReady_ = nullptr;
  ready_ = true;
  loop_.addPoller(this);
  polled_ = true;
  if (ready) ready(Error(), shared_from_this());
}

// --- events -------------------------------------------------------------------

void ShmConnection::onSocketEvent(int status, int events) {
  loop_.noteActivity();
  if (error_) return;
  if (!ready_) {
    if (status < 0) return failSetup(systemError("poll", -status));
    receiveSetup();
    return;
  }
  // Wake-up bytes carry no meaning beyond "look at the rings".
  char buffer[256];
  for (;;) {
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      peerGone();
      return;
    }
    break;
  }
  poll();
}

// The peer closed its end or died. What it put in the ring before is still
// ours to deliver; reads beyond that fail with EOF.
void ShmConnection::peerGone() {
  peerGone_ = true;
  if (poll_ != nullptr) {
    uv_poll_stop(poll_);
  }
  tellPeerGone(ACTORPIPE_ERROR(EOFError));
  serveReads();
  if (!reads_.empty() || !writes_.empty()) {
    closeInLoop(ACTORPIPE_ERROR(EOFError));
  }
}

void ShmConnection::kick() {
  if (peerGone_ || fd_ < 0) return;
  char byte = 0;
  // A full socket buffer means wake-ups are already pending: nothing lost.
  (void)::send(fd_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// --- the rings ------------------------------------------------------------------

// A ring whose counters the peer set to impossible values moves no more
// bytes (ring.h); the connection fails, naming the ring.
bool ShmConnection::checkRings() {
  if (error_) return false;
  if (in_.corrupt() || out_.corrupt()) {
    closeInLoop(ACTORPIPE_ERROR(ProtocolError, std::string("the peer corrupted the shm ring counters (") +
                                                   (in_.corrupt() ? "incoming" : "outgoing") + " ring)"));
    return false;
  }
  return true;
}

namespace {

// How to copy a read of `length` bytes out of the ring (ring.h).
Copy copyFor(size_t length) {
  return length >= kStreamingRead ? Copy::kStreaming : length >= kOwnCopyFrom ? Copy::kOwn : Copy::kMemcpy;
}

}  // namespace

bool ShmConnection::serveReads() {
  if (!ready_) return false;
  bool progress = false;
  pumping_ = true;
  while (!reads_.empty() && !error_) {
    ReadOp& op = reads_.front();
    size_t n = in_.read(op.ptr + op.done, op.length - op.done, copyFor(op.length));
    if (n > 0) {
      progress = true;
      op.done += n;
    }
    if (in_.corrupt()) break;
    if (op.done < op.length) break;
    auto fn = std::move(op.fn);
    reads_.popFront();
    fn(Error());  // may queue more reads or close us
  }
  pumping_ = false;
  progress = std::exchange(pumpedNow_, false) || progress;
  if (progress) noteArrival();
  if (!checkRings()) return progress;
  // Room we made (here or in readNow) may be what a producer waits for.
  if (progress && !error_) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (in_.header()->producerWaiting.load(std::memory_order_relaxed) != 0 &&
        in_.header()->producerWaiting.exchange(0) != 0) {
      kick();
    }
  }
  if (peerGone_ && !reads_.empty() && !error_) {
    closeInLoop(ACTORPIPE_ERROR(EOFError));
  }
  return progress;
}

// Only inside serveReads (pumping_), which then looks for a producer that
// waits for the room this makes.
bool ShmConnection::readNow(void* ptr, size_t length) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  if (!pumping_ || error_ || !reads_.empty()) return false;
  if (!in_.readAll(static_cast<uint8_t*>(ptr), length, copyFor(length))) return false;
  pumpedNow_ = true;
  return true;
}

bool ShmConnection::pushWrites() {
  if (!ready_ || error_) return false;
  bool progress = false;
  bool wokeEarly = false;
  while (!writes_.empty()) {
    WriteOp& op = writes_.front();
    while (op.slice < op.slices.size()) {
      const Slice& s = op.slices[op.slice];
      size_t want = s.length - op.offset;
      // A sleeping reader is woken after the first step of a large slice,
      // not once the ring is full: its wake-up (tens of µs here) overlaps
      // our copying. Same order as the wake-up below: bytes published,
      // fence, then the flag.
      const bool wakeEarly = !wokeEarly && want > kPublishStep &&
                             out_.header()->consumerSleeping.load(std::memory_order_relaxed) != 0;
      if (wakeEarly) want = kPublishStep;
      size_t n = out_.write(static_cast<const uint8_t*>(s.ptr) + op.offset, want);
      if (n > 0) progress = true;
      if (out_.corrupt()) {
        checkRings();  // fails the connection, this write included
        return progress;
      }
      if (wakeEarly && n > 0) {
        wokeEarly = true;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (out_.header()->consumerSleeping.load(std::memory_order_relaxed) != 0) kick();
      }
      op.offset += n;
      if (wakeEarly && n == want) continue;  // the rest of the slice
      if (op.offset < s.length) break;       // the ring is full
      ++op.slice;
      op.offset = 0;
    }
    if (op.slice < op.slices.size()) break;
    completed_.push_back(std::move(op.fn));
    writes_.popFront();
  }
  if (progress) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (out_.header()->consumerSleeping.load(std::memory_order_relaxed) != 0) {
      kick();
    }
  }
  return progress;
}

bool ShmConnection::completeWrites() {
  if (completed_.empty()) return false;
  auto keep = shared_from_this();  // a callback may close us and drop the last reference
  completing_.swap(completed_);  // callbacks may write (and complete) more
  for (auto& fn : completing_) fn(Error());
  completing_.clear();
  return true;
}

bool ShmConnection::poll() {
  if (error_) return false;
  bool progress = serveReads();
  progress = pushWrites() || progress;
  progress = completeWrites() || progress;
  if (!progress) prefault();
  return progress;
}

// A ring's pages are faulted in on first touch: allocated and zeroed by the
// producer's first write, mapped by the consumer's first read, several µs
// each here and on the critical path of whichever message crossed into a new
// page (in a small exchange that was the p99: one slow round trip per 4 KiB
// of frames, docs/benchmarks.md). So while the loop finds nothing to do, each
// side faults in the pages just ahead of its position, 64 KiB per turn, up
// to 256 KiB ahead: memory is committed a little before the bytes arrive,
// never a whole ring for an idle connection. After the first pass every page
// stays mapped, and this costs two compares per idle turn.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL
#define MADV_POPULATE_WRITE 23
#endif

void ShmConnection::prefault() {
  constexpr size_t kStep = 64 * 1024;
  constexpr size_t kAhead = 256 * 1024;
  auto ahead = [&](Ring& ring, size_t& done, int advice) {
    const size_t capacity = ring.capacity();
    if (done >= capacity) return;
    const uint64_t at = ring.position();
    if (at >= capacity) {
      done = capacity;  // a whole pass went through: all mapped
      return;
    }
    if (done >= at + kAhead) return;
    const size_t n = std::min(kStep, capacity - done);
    // Not supported (kernels before 5.14): fault on first touch, as before.
    if (::madvise(ring.data() + done, n, advice) != 0) done = capacity;
    else done += n;
  };
  ahead(out_, outFaulted_, MADV_POPULATE_WRITE);
  ahead(in_, inFaulted_, MADV_POPULATE_READ);
}

bool ShmConnection::prepareToSleep() {
  if (error_ || !ready_) return true;
  if (!completed_.empty()) return false;
  if (!reads_.empty()) {
    in_.header()->consumerSleeping.store(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (in_.hasData()) return false;
  }
  if (!writes_.empty()) {
    out_.header()->producerWaiting.store(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (out_.hasSpace()) return false;
  }
  return true;
}

void ShmConnection::awake() {
  if (ready_ && !error_) in_.header()->consumerSleeping.store(0, std::memory_order_relaxed);
}

// --- operations -------------------------------------------------------------------

void ShmConnection::writeInLoop(Slices slices, write_callback_fn fn) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  // Nobody reads the ring once the peer is gone.
  if (refuseWrite(fn, error_ ? error_ : peerGone_ ? ACTORPIPE_ERROR(EOFError) : Error())) return;
  WriteOp op;
  op.slices = std::move(slices);
  op.fn = std::move(fn);
  writes_.push_back(std::move(op));
  pushWrites();  // now: the reader may be polling for exactly these bytes
}

void ShmConnection::closeInLoop(const Error& reason) {
  if (!startClosing(reason)) return;
  if (setupTimer_ != 0) {
    loop_.cancel(setupTimer_);
    setupTimer_ = 0;
  }
  if (polled_) {
    loop_.removePoller(this);
    polled_ = false;
  }
  auto reads = takeReads();
  auto writes = std::exchange(writes_, detail::Fifo<WriteOp>());
  auto completed = std::move(completed_);
  completed_.clear();
  bool hadHandle = poll_ != nullptr;
  if (hadHandle) {
    uv_poll_stop(poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) {
      auto* self = static_cast<ShmConnection*>(h->data);
      delete reinterpret_cast<uv_poll_t*>(h);
      self->self_.reset();  // may destroy *self
    });
    poll_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  // Without a handle nobody else lets go of us: do it after the callbacks.
  std::shared_ptr<ShmConnection> keep;
  if (!hadHandle) keep = std::move(self_);
  for (auto& fn : completed) fn(Error());
  failReads(reads);
  writes.drain([this](WriteOp op) { op.fn(error_); });
}

std::optional<actorpipe::detail::PeerProcess> ShmConnection::peerProcess() const {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (fd_ < 0 || ::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0 ||
      credentials.pid <= 0) {
    return std::nullopt;  // not connected, or the peer is in another pid namespace
  }
  return actorpipe::detail::PeerProcess{credentials.pid, credentials.uid};
}

} // namespace actorpipe::transport::shm
