#include <actorpipe/channels/detail/pull_endpoint.h>

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <functional>
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

class InProcess final : public MemoryAccess {
 public:
  Error read(pid_t, void* local, uintptr_t remote, size_t length) override {
    std::memcpy(local, reinterpret_cast<const void*>(remote), length);
    return Error();
  }
  Error store(pid_t, uintptr_t remote, uint64_t value) override {
    reinterpret_cast<std::atomic<uint64_t>*>(remote)->store(value, std::memory_order_release);
    return Error();
  }
};

class CrossProcess final : public MemoryAccess {
 public:
  Error read(pid_t pid, void* local, uintptr_t remote, size_t length) override {
    size_t done = 0;
    while (done < length) {
      iovec l{static_cast<uint8_t*>(local) + done, length - done};
      iovec r{reinterpret_cast<void*>(remote + done), length - done};
      ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
      if (n <= 0) {
        return ACTORPIPE_ERROR(SystemError, "process_vm_readv from pid " + std::to_string(pid),
                               n < 0 ? errno : EIO);
      }
      done += static_cast<size_t>(n);
    }
    return Error();
  }
  Error store(pid_t pid, uintptr_t remote, uint64_t value) override {
    // An aligned 8-byte write lands whole: the sender's atomic load sees the
    // old or the new value, nothing in between.
    iovec l{&value, sizeof(value)};
    iovec r{reinterpret_cast<void*>(remote), sizeof(value)};
    if (::process_vm_writev(pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof(value))) {
      return ACTORPIPE_ERROR(SystemError, "process_vm_writev to pid " + std::to_string(pid), errno);
    }
    return Error();
  }
};

// Copies of large tensors are split in two, and a helper thread takes the
// second half: one core cannot saturate memory bandwidth alone (NOTES: one
// thread copies 64 MiB at ~9 GB/s, two at ~18), and while a reader copies,
// its writer waits, so the other core is free.
constexpr size_t kSplitAbove = size_t{4} << 20;

class CopyHelper {
 public:
  // One per process, living for the process (no join at exit). A forked
  // child has the parent's object but not its thread: it makes its own.
  static CopyHelper& instance() {
    static std::mutex mutex;
    static CopyHelper* helper = nullptr;
    std::lock_guard<std::mutex> guard(mutex);
    if (helper == nullptr || helper->pid_ != ::getpid()) helper = new CopyHelper();
    return *helper;
  }
  // Runs `job` on the helper thread; `done` is set when it finished.
  void run(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }

 private:
  CopyHelper() {
    std::thread([this] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          ready_.wait(lock, [this] { return !jobs_.empty(); });
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        job();
      }
    }).detach();
  }
  pid_t pid_{::getpid()};
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
};

// Only where this thread may run on more than one CPU: a process pinned to
// one core gains nothing from a second copying thread there.
bool mayUseTwoCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 1;
}

Error splitRead(MemoryAccess& access, pid_t pid, void* local, uintptr_t remote, size_t length) {
  if (length < kSplitAbove || !mayUseTwoCores()) return access.read(pid, local, remote, length);
  size_t half = (length / 2) & ~size_t(4095);
  std::atomic<bool> finished{false};
  Error second;
  CopyHelper::instance().run([&] {
    second = access.read(pid, static_cast<uint8_t*>(local) + half, remote + half, length - half);
    finished.store(true, std::memory_order_release);
  });
  Error first = access.read(pid, local, remote, half);
  while (!finished.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
  return first ? first : second;
}

}  // namespace

std::shared_ptr<MemoryAccess> inProcessAccess() { return std::make_shared<InProcess>(); }
std::shared_ptr<MemoryAccess> crossProcessAccess() { return std::make_shared<CrossProcess>(); }

PullEndpoint::PullEndpoint(std::shared_ptr<MemoryAccess> access, std::string channel, size_t inlineBelow)
    : access_(std::move(access)),
      channel_(std::move(channel)),
      inlineBelow_(inlineBelow),
      acked_(newAckWord()) {}
// acked_ is deliberately not deleted (8 bytes per pipe): see the header.

PullEndpoint::~PullEndpoint() = default;

void PullEndpoint::attach(actorpipe::detail::Loop& loop) {
  loop_ = &loop;
  loop_->addPoller(this);
  polled_ = true;
}

// "pid:address:length:ack-address:sequence"
std::string PullEndpoint::send(const void* ptr, size_t length, done_fn done) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (error_) {
    done(error_);
    return std::string();
  }
  uint64_t seq = nextSeq_++;
  pending_.push_back({seq, std::move(done)});
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%d:%" PRIxPTR ":%zu:%" PRIxPTR ":%" PRIu64, static_cast<int>(::getpid()),
                reinterpret_cast<uintptr_t>(ptr), length, reinterpret_cast<uintptr_t>(acked_), seq);
  return buf;
}

void PullEndpoint::recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) {
  int pid = 0;
  uintptr_t address = 0, ack = 0;
  size_t announced = 0;
  uint64_t seq = 0;
  int consumed = 0;
  if (std::sscanf(descriptor.c_str(), "%d:%" SCNxPTR ":%zu:%" SCNxPTR ":%" SCNu64 "%n", &pid, &address,
                  &announced, &ack, &seq, &consumed) != 5 ||
      static_cast<size_t>(consumed) != descriptor.size()) {
    return done(ACTORPIPE_ERROR(ProtocolError, "bad " + channel_ + " descriptor '" + descriptor + "'"));
  }
  if (announced != length) {
    return done(ACTORPIPE_ERROR(ProtocolError, channel_ + " descriptor announces " + std::to_string(announced) +
                                                   " bytes for a tensor of " + std::to_string(length)));
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (error_) return done(error_);
  }
  if (auto e = splitRead(*access_, pid, ptr, address, length)) return done(e);
  // Acknowledge before reporting: see the header.
  if (auto e = access_->store(pid, ack, seq)) return done(e);
  done(Error());
}

bool PullEndpoint::poll() {
  uint64_t acked = acked_->load(std::memory_order_acquire);
  std::deque<Pending> finished;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    while (!pending_.empty() && pending_.front().seq <= acked) {
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
  std::deque<Pending> failed;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (error_) return;
    error_ = reason;
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
